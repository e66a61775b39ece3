package core

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures an [Engine].
type Config struct {
	// Store holds budget state. Required when there are Budgets.
	Store Store
	// Budgets are the engine's named limits. An engine with none serves
	// layers that only guard ([GuardBy]: a load shedder alone, as the
	// adapters' ShedBy functions build) and needs no Store.
	Budgets []Budget
	// Headers is the default header style of the engine's layers.
	// Default HeadersIETF.
	Headers HeaderStyle
	// Deny renders denials. Default DefaultDeny (RFC 9457 problem details).
	Deny DenyFunc
	// Observer is told about every decision and store error. Optional.
	Observer Observer
	// FailureMode applies to budgets that do not set their own.
	// Default FailOpen.
	FailureMode FailureMode
	// Fallback is the store FailLocal budgets use while Store is
	// unavailable, typically a memory store (core/memstore). Required when any budget (or
	// FailureMode) is FailLocal.
	Fallback Store
	// BreakerThreshold is how many consecutive store failures open the
	// circuit breaker; while open, the store is not called and budgets
	// apply their failure mode at once. After BreakerCooldown one request
	// probes the store; success closes the breaker. Default 5; negative
	// disables the breaker.
	BreakerThreshold int
	// BreakerCooldown is how long the breaker stays open. Default 1s.
	BreakerCooldown time.Duration
	// OnBreaker, if set, is called when the circuit breaker opens (true)
	// or closes (false). Calls are serialised and alternate, and the last
	// one always tells the breaker's current state (a quick open-close
	// may be reported as nothing). It runs on a request's goroutine, and
	// changes made meanwhile are reported by that goroutine after it
	// returns: keep it quick. It may use the engine.
	OnBreaker func(open bool)
	// Logger receives a line when store calls start failing (the error,
	// and each budget's failure mode), at most one per [StoreLogInterval]
	// while they go on failing, and one when the store answers again, so
	// that a store that cannot answer is visible with nothing else
	// configured. Default slog.Default(); slog.New(slog.DiscardHandler)
	// turns the lines off.
	Logger *slog.Logger
	// Clock times the breaker and epoch-style reset headers.
	// Default: a SystemClock.
	Clock Clock
	// DryRun makes every budget a shadow budget: nothing is denied, and
	// what would have been is reported.
	DryRun bool
}

// ErrBreakerOpen is the error reported while the circuit breaker skips a
// failing store.
var ErrBreakerOpen = errors.New("quotagate: store circuit breaker is open")

// Engine evaluates requests against named budgets. It is safe for
// concurrent use. Create one per set of budgets and store, then a [Layer]
// per middleware.
type Engine struct {
	store    Store
	fallback Store
	observer Observer
	deny     DenyFunc
	headers  HeaderStyle
	clock    Clock
	mode     FailureMode
	dryRun   bool
	breaker  breaker
	log      storeLog

	rules atomic.Pointer[ruleset]

	mu     sync.Mutex // serialises Layer creation and Reload
	layers []*Layer
}

type ruleset struct {
	byName map[string]*rule
}

// rule is a validated budget with what the hot path needs precomputed.
type rule struct {
	Budget
	static Limit
	mode   FailureMode
	// policy is the budget's RateLimit-Policy list member for its static
	// limit, and sfName its name as an sf-string: rendered once, so the
	// hot path copies them instead of formatting.
	policy string
	sfName string
}

// New returns an engine configured by cfg, or a *ConfigError listing every
// problem found.
func New(cfg Config) (*Engine, error) {
	var problems []error
	if cfg.Store == nil && len(cfg.Budgets) > 0 {
		problems = append(problems, errors.New("engine: no store"))
	}
	if cfg.Headers < HeadersIETF || cfg.Headers > HeadersNone {
		problems = append(problems, fmt.Errorf("engine: unknown header style %d", int(cfg.Headers)))
	}
	if cfg.FailureMode == FailInherit {
		cfg.FailureMode = FailOpen
	}
	if cfg.FailureMode < FailInherit || cfg.FailureMode > FailLocal {
		problems = append(problems, fmt.Errorf("engine: unknown failure mode %d", int(cfg.FailureMode)))
	}
	if cfg.BreakerThreshold == 0 {
		cfg.BreakerThreshold = 5
	}
	if cfg.BreakerCooldown == 0 {
		cfg.BreakerCooldown = time.Second
	}
	if cfg.BreakerCooldown < 0 {
		problems = append(problems, fmt.Errorf("engine: breaker cooldown %v is negative", cfg.BreakerCooldown))
	}
	if cfg.Clock == nil {
		cfg.Clock = NewSystemClock()
	}
	if cfg.Deny == nil {
		cfg.Deny = DefaultDeny
	}
	rs, rp := compileRules(cfg.Budgets, cfg.FailureMode, cfg.Fallback != nil)
	problems = append(problems, rp...)
	if err := configError(problems); err != nil {
		return nil, err
	}
	e := &Engine{
		store:    cfg.Store,
		fallback: cfg.Fallback,
		observer: cfg.Observer,
		deny:     cfg.Deny,
		headers:  cfg.Headers,
		clock:    cfg.Clock,
		mode:     cfg.FailureMode,
		dryRun:   cfg.DryRun,
	}
	e.log.logger = cfg.Logger
	if e.log.logger == nil {
		e.log.logger = slog.Default()
	}
	e.breaker.threshold = int64(cfg.BreakerThreshold)
	e.breaker.onChange = cfg.OnBreaker
	e.breaker.cooldown = cfg.BreakerCooldown.Microseconds()
	e.rules.Store(rs)
	return e, nil
}

// MustNew is New for a configuration known to be valid; it panics on error.
// Use it at start-up only.
func MustNew(cfg Config) *Engine {
	e, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return e
}

// ValidateBudgets reports every problem [New] would report in budgets:
// each budget's own ([Budget.Validate]) and a name defined twice. It
// returns them as a *ConfigError, or nil. It builds no engine and
// needs no store; what depends on the engine's configuration (FailLocal
// without a fallback store) is left to New.
func ValidateBudgets(budgets []Budget) error {
	_, problems := compileRules(budgets, FailOpen, true)
	return configError(problems)
}

func compileRules(budgets []Budget, engineMode FailureMode, haveFallback bool) (*ruleset, []error) {
	var problems []error
	rs := &ruleset{byName: make(map[string]*rule, len(budgets))}
	for i := range budgets {
		b := budgets[i]
		b.IgnoreMethods = append([]string(nil), b.IgnoreMethods...)
		if b.KeyClass == "" {
			b.KeyClass = "custom"
		}
		errs := b.validate()
		problems = append(problems, errs...)
		if _, dup := rs.byName[b.Name]; dup && b.Name != "" {
			problems = append(problems, fmt.Errorf("budget %q: defined more than once", b.Name))
			continue
		}
		r := &rule{Budget: b, mode: b.FailureMode}
		if r.mode == FailInherit {
			r.mode = engineMode
		}
		if r.mode == FailLocal && !haveFallback {
			problems = append(problems, fmt.Errorf("budget %q: fail-local needs a fallback store", b.Name))
		}
		if len(errs) == 0 {
			r.static = b.limitFor(b.Quota)
			r.sfName = string(appendSFString(nil, b.Name))
			r.policy = string(appendPolicyMember(nil, &Result{Item: Item{Budget: b.Name, Limit: r.static}, rule: r}, r.static))
		}
		rs.byName[b.Name] = r
	}
	return rs, problems
}

// Reload atomically replaces the engine's budgets. It validates the new
// budgets and every existing layer against them first and changes nothing
// when anything is wrong. Decisions in flight finish under the budgets they
// started with; state of budgets whose name, algorithm and window are
// unchanged carries over (quotas are applied to the state at the next
// request).
func (e *Engine) Reload(budgets []Budget) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs, problems := compileRules(budgets, e.mode, e.fallback != nil)
	if len(problems) == 0 {
		for _, l := range e.layers {
			problems = append(problems, l.validate(rs)...)
		}
	}
	if err := configError(problems); err != nil {
		return err
	}
	e.rules.Store(rs)
	return nil
}

// Budget returns a copy of the named budget as currently configured.
func (e *Engine) Budget(name string) (Budget, bool) {
	r, ok := e.rules.Load().byName[name]
	if !ok {
		return Budget{}, false
	}
	return r.Budget, true
}

// Observer is told what the engine decides. Methods are called on the
// request's goroutine and must be quick and safe for concurrent use.
type Observer interface {
	// ObserveDecision is called once per layer a request passes, with the
	// results that layer added and the time its store call took (0 when the
	// store was not called), when the request's fate in that layer is
	// final: at once when the layer denies; otherwise when the request
	// leaves the layer (after the handler, through a router adapter), so a
	// later layer's denial or a core.CountWhen refund is seen (the results
	// are then marked Refunded). A direct call of Layer.Decide observes at
	// once. A layer that evaluated no budget is not observed when another
	// layer denied the request.
	ObserveDecision(r *Request, d *Decision, layer []Result, storeLatency time.Duration)
	// ObserveError is called for every store error, quota-resolver error,
	// key-function error and cost-function error, with its kind and the
	// budget it concerns. Store kinds (kind.IsStore()) come with an empty
	// budget, since a store call covers every budget of a layer, and an
	// error of type *StoreError (or ErrBreakerOpen itself).
	ObserveError(kind ErrorKind, budget string, err error)
}

// breaker is a consecutive-failure circuit breaker.
type breaker struct {
	threshold int64
	cooldown  int64 // µs
	failures  atomic.Int64
	openUntil atomic.Int64 // µs; 0 when closed
	probing   atomic.Bool
	onChange  func(open bool)
	// One goroutine at a time delivers onChange calls (delivering), and
	// reported is the state it last announced, so calls alternate and
	// follow the breaker's state even when an opening and a closing race.
	// A change made while a call is being delivered (by another request,
	// or by a decision inside the callback) is left pending for the
	// delivering goroutine, so no one waits on a callback.
	pending, delivering atomic.Bool
	reported            bool // guarded by delivering
}

// notify tells onChange the breaker's current state, if it has changed
// since the last call, or leaves that to the goroutine delivering a call.
func (b *breaker) notify() {
	if b.onChange == nil {
		return
	}
	b.pending.Store(true)
	for b.pending.Load() && b.delivering.CompareAndSwap(false, true) {
		b.pending.Store(false)
		b.deliver()
	}
}

// deliver announces state changes until the last announced state is the
// breaker's. The caller holds delivering, which deliver releases.
func (b *breaker) deliver() {
	defer b.delivering.Store(false)
	for {
		open := b.openUntil.Load() != 0
		if open == b.reported {
			return
		}
		b.reported = open
		b.onChange(open)
	}
}

// allow reports whether the store may be called now. It reads the clock
// only while the breaker is open.
func (b *breaker) allow(c Clock) bool {
	until := b.openUntil.Load()
	if until == 0 || b.threshold < 0 {
		return true
	}
	if nowMicros(c) < until {
		return false
	}
	return b.probing.CompareAndSwap(false, true) // half-open: one probe
}

func (b *breaker) record(err error, c Clock) {
	if b.threshold < 0 {
		return
	}
	if err == nil {
		if b.failures.Load() != 0 || b.openUntil.Load() != 0 {
			b.failures.Store(0)
			wasOpen := b.openUntil.Swap(0) != 0
			b.probing.Store(false)
			if wasOpen {
				b.notify()
			}
		}
		return
	}
	if f := b.failures.Add(1); f >= b.threshold || b.probing.Load() {
		wasOpen := b.openUntil.Swap(nowMicros(c)+b.cooldown) != 0
		b.probing.Store(false)
		if !wasOpen {
			b.notify()
		}
	}
}

// BreakerOpen reports whether the circuit breaker is currently skipping the
// store.
func (e *Engine) BreakerOpen() bool {
	until := e.breaker.openUntil.Load()
	return until != 0 && nowMicros(e.clock) < until
}
