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
// failure at once, then at most one line per StoreLogInterval while
// failures go on (with their count since the previous line), and one line
// when a store call succeeds again. A store that answers costs one atomic
// load per call.
type storeLog struct {
	logger  *slog.Logger
	failing atomic.Bool  // a spell of failures is on
	logged  atomic.Bool  // a line was written about the current spell
	began   atomic.Int64 // micros: when the spell began
	next    atomic.Int64 // micros: when the next failure line may be written
	since   atomic.Int64 // failures since the previous line
	total   atomic.Int64 // failures in the spell
}

// fail records a failed store call (op) with err; budgets names the
// budgets it decided and their failure modes ("api=open,writes=closed"),
// computed only when a line is written. Lines about failures, a spell's
// first included, are at least StoreLogInterval apart, so that a store
// that flaps cannot flood the log; the failures in between are counted.
func (l *storeLog) fail(c Clock, op string, err error, budgets func() string) {
	l.total.Add(1)
	l.since.Add(1)
	now := nowMicros(c)
	if l.failing.CompareAndSwap(false, true) {
		l.began.Store(now)
	}
	if err == ErrBreakerOpen {
		return // counted; the breaker's probes report the store's own errors
	}
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+StoreLogInterval.Microseconds()) {
		return
	}
	n := l.since.Swap(0)
	kind := ClassifyStoreError(err).String()
	if !l.logged.Swap(true) {
		l.logger.Error("quotagate: store call failed; each budget applies its failure mode until the store answers "+
			"(open: requests pass unlimited, closed: 503, local: the fallback store)",
			"op", op, "error", err, "kind", kind, "budgets", budgets())
		return
	}
	l.logger.Error("quotagate: store still failing",
		"op", op, "error", err, "kind", kind, "failures", n,
		"for", time.Duration(now-l.began.Load())*time.Microsecond, "budgets", budgets())
}

// ok records a store call that succeeded, ending a spell of failures; the
// end is logged when the spell was. Callers check failing first, so that
// a store that answers costs one atomic load.
func (l *storeLog) ok(c Clock) {
	if !l.failing.CompareAndSwap(true, false) {
		return
	}
	total := l.total.Swap(0)
	if !l.logged.Swap(false) {
		return
	}
	l.since.Store(0)
	l.logger.Info("quotagate: store recovered", "failures", total,
		"after", time.Duration(nowMicros(c)-l.began.Load())*time.Microsecond)
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
