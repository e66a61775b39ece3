package observe

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
)

// LoggerConfig configures a [Logger]. The zero value is usable.
type LoggerConfig struct {
	// NearLimit is the share of a budget's capacity (quota, or burst for
	// bucket algorithms) at or above which an allowed request is logged as
	// near the limit; see [NearLimit]. Default 0.8. Negative disables
	// near-limit lines. Must be at most 1.
	NearLimit float64
	// Lines is how many lines each kind of event (denied, shadow_denied,
	// near_limit, store_error, ...) may write per Per; each kind has its own
	// allowance, so a flood of denials never hides a store error. Lines
	// beyond it are suppressed and counted. Default 10.
	Lines int
	// Per is the period of Lines: a kind may write Lines lines at once,
	// then one every Per/Lines. Default 10 seconds.
	Per time.Duration
	// ClientIP adds the client's address (the transport peer's IP, without
	// the port) to request lines as client_ip. Off by default: client
	// addresses are personal data, not for info-level logs unless the
	// operator decides so.
	ClientIP bool
	// Clock times the log rate limit. Default: a core.SystemClock.
	Clock core.Clock
}

// Logger is a [core.Observer] that writes to a log/slog logger:
//
//   - every denied decision (event=denied, level Info), once per request;
//   - every shadow budget that would have denied (event=shadow_denied,
//     Info), including every budget of an engine in dry-run mode;
//   - every allowed request at or above the near-limit share of a budget
//     (event=near_limit, Info);
//   - store errors (event=store_error, Warn), calls skipped by an open
//     circuit breaker (event=breaker_open, Warn), store calls canceled by
//     the client going away (event=store_canceled, Debug), budget errors
//     such as a failing quota resolver (event=budget_error, Warn) and
//     requests without a key (event=no_key, Debug);
//   - a store that is set up wrongly (event=store_misconfigured, Error;
//     see [core.KindStoreMisconfigured]): the first such error is written once, in
//     full, whatever the rate limit; later ones are only counted, and
//     reported as suppressed by [Logger.Flush].
//   - live entries a memstore.Store evicted because it was full
//     (event=evicted, Warn), with the evicted entry's budget, when the
//     Logger is the store's observer (memstore.Config.Observer, alone or
//     through [Multi]): a key of that budget has lost its count.
//
// Lines carry the budget, its key class, the request's method and route
// pattern, never the partition key or the raw path. Each event kind is
// rate-limited on its own ([LoggerConfig].Lines per Per); the first line a
// kind writes after suppressing some carries suppressed=N, and [Logger.Flush]
// reports counts still pending. So for every kind, events = lines written
// + the sum of suppressed counts reported + those still pending.
//
// A Logger is safe for concurrent use. Deciding that nothing is to be
// logged (an allowed request below the near-limit share) does not allocate.
type Logger struct {
	log      *slog.Logger
	near     float64
	clientIP bool
	clock    core.Clock
	interval int64 // µs between lines of one kind
	slack    int64 // µs of burst tolerance
	total    atomic.Uint64
	kinds    [numEvents]lineBucket
	// misconfigured is set once the first store_misconfigured line is
	// written: that line says all there is to say.
	misconfigured atomic.Bool
}

// event is a kind of log line, each rate-limited on its own.
type event uint8

const (
	evDenied event = iota
	evShadow
	evNear
	evStoreError
	evStoreCanceled
	evBreaker
	evBudgetError
	evNoKey
	evMisconfigured
	evEvicted
	numEvents
)

var events = [numEvents]struct {
	name  string
	msg   string
	level slog.Level
}{
	evDenied:        {"denied", "quotagate: request denied", slog.LevelInfo},
	evShadow:        {"shadow_denied", "quotagate: shadow budget would have denied", slog.LevelInfo},
	evNear:          {"near_limit", "quotagate: budget near its limit", slog.LevelInfo},
	evStoreError:    {"store_error", "quotagate: store error", slog.LevelWarn},
	evStoreCanceled: {"store_canceled", "quotagate: store call canceled", slog.LevelDebug},
	evBreaker:       {"breaker_open", "quotagate: store skipped, circuit breaker open", slog.LevelWarn},
	evBudgetError:   {"budget_error", "quotagate: budget error", slog.LevelWarn},
	evNoKey:         {"no_key", "quotagate: no key for request", slog.LevelDebug},
	evMisconfigured: {"store_misconfigured", "quotagate: the store is misconfigured: every decision that reaches it fails and applies its budget's failure mode until the configuration is fixed", slog.LevelError},
	evEvicted:       {"evicted", "quotagate: memory store full, a live entry was evicted", slog.LevelWarn},
}

// lineBucket is a GCRA limiter for one event kind, lock-free.
type lineBucket struct {
	tat        atomic.Int64 // theoretical arrival time, µs
	suppressed atomic.Int64 // lines suppressed since the last report
}

func (b *lineBucket) allow(now, interval, slack int64) bool {
	for {
		tat := b.tat.Load()
		t := max(tat, now)
		if t-now > slack {
			return false
		}
		if b.tat.CompareAndSwap(tat, t+interval) {
			return true
		}
	}
}

// NewLogger returns a Logger writing to log (slog.Default() when nil),
// configured by cfg.
func NewLogger(log *slog.Logger, cfg LoggerConfig) (*Logger, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.NearLimit == 0 {
		cfg.NearLimit = 0.8
	}
	if cfg.Lines == 0 {
		cfg.Lines = 10
	}
	if cfg.Per == 0 {
		cfg.Per = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = core.NewSystemClock()
	}
	var problems []error
	if cfg.NearLimit > 1 {
		problems = append(problems, fmt.Errorf("observe: near-limit share %v is above 1", cfg.NearLimit))
	}
	if cfg.Lines < 0 {
		problems = append(problems, fmt.Errorf("observe: log lines %d is negative", cfg.Lines))
	}
	if cfg.Per < 0 {
		problems = append(problems, fmt.Errorf("observe: log period %v is negative", cfg.Per))
	}
	if len(problems) > 0 {
		return nil, &core.ConfigError{Problems: problems}
	}
	interval := max(int64(1), (cfg.Per.Microseconds()+int64(cfg.Lines)-1)/int64(cfg.Lines))
	return &Logger{
		log:      log,
		near:     cfg.NearLimit,
		clientIP: cfg.ClientIP,
		clock:    cfg.Clock,
		interval: interval,
		slack:    int64(cfg.Lines-1) * interval,
	}, nil
}

// MustLogger is NewLogger for options known to be valid; it panics on
// error.
func MustLogger(log *slog.Logger, cfg LoggerConfig) *Logger {
	l, err := NewLogger(log, cfg)
	if err != nil {
		panic(err)
	}
	return l
}

// ObserveDecision implements [core.Observer].
func (l *Logger) ObserveDecision(r *core.Request, d *core.Decision, layer []core.Result, _ time.Duration) {
	if LayerDenied(d, layer) {
		l.denied(r, d, layer)
	}
	for i := range layer {
		res := &layer[i]
		switch Classify(d, res) {
		case ShadowDenied:
			l.result(evShadow, r, res)
		case Allowed:
			if l.near > 0 && NearLimit(d, res, l.near) {
				l.result(evNear, r, res)
			}
		}
	}
}

// ObserveError implements [core.Observer].
func (l *Logger) ObserveError(kind core.ErrorKind, budget string, err error) {
	var ev event
	switch kind {
	case core.KindStoreError, core.KindStoreTimeout:
		ev = evStoreError
	case core.KindStoreCanceled:
		ev = evStoreCanceled
	case core.KindBreakerOpen:
		ev = evBreaker
	case core.KindStoreMisconfigured:
		ev = evMisconfigured
	case core.KindMissingKey:
		ev = evNoKey
	default:
		ev = evBudgetError
	}
	ctx := context.Background()
	n, ok := l.admit(ctx, ev)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("event", events[ev].name))
	if budget != "" {
		attrs = append(attrs, slog.String("budget", budget))
	}
	if kind == core.KindStoreTimeout {
		attrs = append(attrs, slog.Bool("timeout", true))
	}
	attrs = append(attrs, slog.String("error", err.Error()))
	l.write(ctx, ev, n, attrs)
}

// ObserveEviction implements [core.EvictionObserver]: one line per evicted
// entry, rate-limited like every kind.
func (l *Logger) ObserveEviction(budget string) {
	ctx := context.Background()
	n, ok := l.admit(ctx, evEvicted)
	if !ok {
		return
	}
	l.write(ctx, evEvicted, n, []slog.Attr{slog.String("event", events[evEvicted].name), slog.String("budget", budget)})
}

// admit reports whether a line of kind ev is to be written now, and how
// many lines of that kind were suppressed before it.
func (l *Logger) admit(ctx context.Context, ev event) (int64, bool) {
	if !l.log.Enabled(ctx, events[ev].level) {
		return 0, false
	}
	b := &l.kinds[ev]
	if ev == evMisconfigured {
		if l.misconfigured.CompareAndSwap(false, true) {
			return b.suppressed.Swap(0), true
		}
		b.suppressed.Add(1)
		l.total.Add(1)
		return 0, false
	}
	if !b.allow(l.clock.Now().UnixMicro(), l.interval, l.slack) {
		b.suppressed.Add(1)
		l.total.Add(1)
		return 0, false
	}
	return b.suppressed.Swap(0), true
}

func (l *Logger) write(ctx context.Context, ev event, suppressed int64, attrs []slog.Attr) {
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	l.log.LogAttrs(ctx, events[ev].level, events[ev].msg, attrs...)
}

func reqContext(r *core.Request) context.Context {
	if r != nil && r.Context != nil {
		return r.Context
	}
	return context.Background()
}

// requestAttrs appends what may be logged about r: method, route pattern,
// and the client IP when configured. Never the raw path or a key.
func (l *Logger) requestAttrs(attrs []slog.Attr, r *core.Request) []slog.Attr {
	if r == nil {
		return attrs
	}
	if r.Method != "" {
		attrs = append(attrs, slog.String("method", r.Method))
	}
	if r.Route != "" {
		attrs = append(attrs, slog.String("route", r.Route))
	}
	if l.clientIP {
		if ip, ok := peerIP(r.RemoteAddr); ok {
			attrs = append(attrs, slog.String("client_ip", ip.String()))
		}
	}
	return attrs
}

// peerIP returns the IP of a transport address "ip:port" or "ip".
func peerIP(addr string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap.Addr().Unmap(), true
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		return ip.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

func (l *Logger) denied(r *core.Request, d *core.Decision, layer []core.Result) {
	ctx := reqContext(r)
	n, ok := l.admit(ctx, evDenied)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("event", events[evDenied].name),
		slog.String("reason", d.Reason.String()))
	if d.Reason == core.ReasonOverloaded {
		// Shed by a guard (core.GuardBy), not by a budget.
		attrs = append(attrs, slog.String("guard", d.DeniedBy),
			slog.Int64("limit", d.Guard.Limit), slog.Int64("in_flight", d.Guard.InFlight))
	} else if d.DeniedBy != "" {
		attrs = append(attrs, slog.String("budget", d.DeniedBy))
		for i := range layer {
			if layer[i].Budget == d.DeniedBy {
				res := &layer[i]
				attrs = append(attrs,
					slog.String("key_class", res.KeyClass),
					slog.Int64("quota", res.Limit.Quota),
					windowAttr(&res.Limit))
				break
			}
		}
	}
	if d.RetryAfter > 0 {
		attrs = append(attrs, slog.Duration("retry_after", d.RetryAfter))
	}
	// d.Err may be left over from an earlier layer that failed open; these
	// reasons set it in the layer that denied.
	if d.Err != nil && d.Reason != core.ReasonRateLimited && d.Reason != core.ReasonAllowed {
		attrs = append(attrs, slog.String("error", d.Err.Error()))
	}
	attrs = l.requestAttrs(attrs, r)
	l.write(ctx, evDenied, n, attrs)
}

func (l *Logger) result(ev event, r *core.Request, res *core.Result) {
	ctx := reqContext(r)
	n, ok := l.admit(ctx, ev)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("event", events[ev].name),
		slog.String("budget", res.Budget),
		slog.String("key_class", res.KeyClass),
		slog.Int64("remaining", res.Remaining),
		slog.Int64("quota", res.Limit.Quota),
		windowAttr(&res.Limit),
		slog.Int64("cost", res.Cost))
	if c := res.Limit.Capacity(); c != res.Limit.Quota {
		attrs = append(attrs, slog.Int64("burst", c))
	}
	if ev == evShadow && res.RetryAfter > 0 {
		attrs = append(attrs, slog.Duration("retry_after", res.RetryAfter))
	}
	attrs = l.requestAttrs(attrs, r)
	l.write(ctx, ev, n, attrs)
}

// Flush writes one line for every event kind with suppressed lines not yet
// reported (event=<kind>, suppressed=N, at the kind's level) and returns
// how many suppressed lines it reported. These lines are not rate-limited:
// there is at most one per kind. Call it at shutdown, or periodically.
func (l *Logger) Flush() int64 {
	var total int64
	ctx := context.Background()
	for ev := range numEvents {
		n := l.kinds[ev].suppressed.Swap(0)
		if n == 0 {
			continue
		}
		total += n
		l.log.LogAttrs(ctx, events[ev].level, "quotagate: log lines suppressed",
			slog.String("event", events[ev].name), slog.Int64("suppressed", n))
	}
	return total
}

// Suppressed returns how many lines the rate limit has suppressed since
// the Logger was created.
func (l *Logger) Suppressed() uint64 { return l.total.Load() }

// FlushEvery calls [Logger.Flush] every period until ctx is done, then
// once more. Run it in its own goroutine so suppressed counts are reported
// even when a flood stops and no further line of its kind comes.
func (l *Logger) FlushEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Flush()
			return
		case <-t.C:
			l.Flush()
		}
	}
}

// windowAttr is a limit's window, or a concurrency budget's lease, which
// its Window holds.
func windowAttr(l *core.Limit) slog.Attr {
	if l.Algorithm == core.Concurrency {
		return slog.Duration("lease", l.Window)
	}
	return slog.Duration("window", l.Window)
}
