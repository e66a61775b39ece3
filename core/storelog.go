package core

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// StoreLogInterval is how often, at most, an engine logs that its store
// is still failing (see [Config.Logger]).
const StoreLogInterval = 30 * time.Second

// storeLog writes an engine's store failures to a logger: the first
// failure of a spell at once, then at most one line per StoreLogInterval
// while the spell lasts (with the count of failures since the previous
// line), and one line when a store call succeeds again. A store that
// answers costs one atomic load per call.
type storeLog struct {
	logger  *slog.Logger
	failing atomic.Bool
	began   atomic.Int64 // micros: when the spell began
	next    atomic.Int64 // micros: when the next "still failing" line may be written
	since   atomic.Int64 // failures since the previous line
	total   atomic.Int64 // failures in the spell
}

// fail records a failed store call (op) with err; budgets names the
// budgets it decided and their failure modes ("api=open,writes=closed"),
// computed only when a line is written.
func (l *storeLog) fail(c Clock, op string, err error, budgets func() string) {
	if l.logger == nil {
		return
	}
	l.total.Add(1)
	n := l.since.Add(1)
	if err == ErrBreakerOpen && l.failing.Load() {
		return // counted; the breaker's probes report the store's own errors
	}
	now := nowMicros(c)
	if l.failing.CompareAndSwap(false, true) {
		l.began.Store(now)
		l.next.Store(now + StoreLogInterval.Microseconds())
		l.since.Add(-n)
		l.logger.Error("quotagate: store call failed; each budget applies its failure mode until the store answers "+
			"(open: requests pass unlimited, closed: 503, local: the fallback store)",
			"op", op, "error", err, "kind", ClassifyStoreError(err).String(), "budgets", budgets())
		return
	}
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+StoreLogInterval.Microseconds()) {
		return
	}
	n = l.since.Swap(0)
	l.logger.Error("quotagate: store still failing",
		"op", op, "error", err, "kind", ClassifyStoreError(err).String(), "failures", n,
		"for", time.Duration(now-l.began.Load())*time.Microsecond, "budgets", budgets())
}

// ok records a store call that succeeded, ending a spell of failures.
func (l *storeLog) ok(c Clock) {
	if !l.failing.Load() || !l.failing.CompareAndSwap(true, false) {
		return
	}
	now := nowMicros(c)
	total := l.total.Swap(0)
	l.since.Store(0)
	l.logger.Info("quotagate: store recovered", "failures", total,
		"after", time.Duration(now-l.began.Load())*time.Microsecond)
}

// modesOf lists rules' budgets with their failure modes, for a log line.
func modesOf(rules []*rule) string {
	var b strings.Builder
	for i, r := range rules {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.Name)
		b.WriteByte('=')
		b.WriteString(r.mode.String())
	}
	return b.String()
}
