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
	// disables the breaker. A [ShardedStore] (a Redis Cluster) gets a
	// breaker per shard: a failing master opens the breaker of its own
	// keys only.
	BreakerThreshold int
	// BreakerCooldown is how long the breaker stays open. Default 1s.
	BreakerCooldown time.Duration
	// OnBreaker, if set, is called when the circuit breaker opens (true)
	// or closes (false); with a breaker per shard, when the first opens
	// and when the last closes. Calls are serialised and alternate, and the last
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
	breakers breakers
	sharded  ShardedStore // the store, when it is one; nil otherwise
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
	n := 1
	if ss, ok := cfg.Store.(ShardedStore); ok {
		e.sharded = ss
		n += MaxShards
	}
	e.breakers.init(cfg.BreakerThreshold, cfg.BreakerCooldown, n, cfg.OnBreaker)
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

// breakers are the engine's consecutive-failure circuit breakers: one for
// the store, and, when the store is a [ShardedStore], one per shard
// besides (all[1+shard]; all[0] serves calls the store cannot place on
// one shard). OnBreaker hears of them together: open while any is open.
type breakers struct {
	threshold int64
	cooldown  int64 // µs
	all       []breaker
	onChange  func(open bool)
	// One goroutine at a time delivers onChange calls (delivering), and
	// reported is the state it last announced, so calls alternate and
	// follow the breakers' state even when an opening and a closing race.
	// A change made while a call is being delivered (by another request,
	// or by a decision inside the callback) is left pending for the
	// delivering goroutine, so no one waits on a callback.
	pending, delivering atomic.Bool
	reported            bool // guarded by delivering
}

// breaker is one circuit breaker's state.
type breaker struct {
	failures  atomic.Int64
	openUntil atomic.Int64 // µs; 0 when closed
	probing   atomic.Bool
	_         [40]byte // one cache line each: shards fail apart
}

// init sets bs up with n breakers.
func (bs *breakers) init(threshold int, cooldown time.Duration, n int, onChange func(bool)) {
	bs.threshold, bs.cooldown, bs.onChange = int64(threshold), cooldown.Microseconds(), onChange
	bs.all = make([]breaker, n)
}

// of returns the breaker of a call the store places on shard (see
// ShardedStore.Shard; -1 for none or several).
func (bs *breakers) of(shard int) *breaker {
	if shard < 0 || shard+1 >= len(bs.all) {
		return &bs.all[0]
	}
	return &bs.all[shard+1]
}

// anyOpen reports whether a breaker is open (or waits for its probe).
func (bs *breakers) anyOpen() bool {
	for i := range bs.all {
		if bs.all[i].openUntil.Load() != 0 {
			return true
		}
	}
	return false
}

// failing reports whether a breaker's last calls failed: with a breaker
// per shard, a call that succeeds on one shard does not end a spell of
// failures while another shard's calls fail. It is false when breakers
// are disabled (they then count nothing).
func (bs *breakers) failing() bool {
	for i := range bs.all {
		if bs.all[i].failures.Load() != 0 || bs.all[i].openUntil.Load() != 0 {
			return true
		}
	}
	return false
}

// notify tells onChange the breakers' current state, if it has changed
// since the last call, or leaves that to the goroutine delivering a call.
func (bs *breakers) notify() {
	if bs.onChange == nil {
		return
	}
	bs.pending.Store(true)
	for bs.pending.Load() && bs.delivering.CompareAndSwap(false, true) {
		bs.pending.Store(false)
		bs.deliver()
	}
}

// deliver announces state changes until the last announced state is the
// breakers'. The caller holds delivering, which deliver releases.
func (bs *breakers) deliver() {
	defer bs.delivering.Store(false)
	for {
		open := bs.anyOpen()
		if open == bs.reported {
			return
		}
		bs.reported = open
		bs.onChange(open)
	}
}

// allow reports whether the store may be called now through b. It reads
// the clock only while b is open.
func (bs *breakers) allow(b *breaker, c Clock) bool {
	until := b.openUntil.Load()
	if until == 0 || bs.threshold < 0 {
		return true
	}
	if nowMicros(c) < until {
		return false
	}
	return b.probing.CompareAndSwap(false, true) // half-open: one probe
}

// record counts the result of a store call made through b.
func (bs *breakers) record(b *breaker, err error, c Clock) {
	if bs.threshold < 0 {
		return
	}
	if err == nil {
		if b.failures.Load() != 0 || b.openUntil.Load() != 0 {
			b.failures.Store(0)
			wasOpen := b.openUntil.Swap(0) != 0
			b.probing.Store(false)
			if wasOpen {
				bs.notify()
			}
		}
		return
	}
	if f := b.failures.Add(1); f >= bs.threshold || b.probing.Load() {
		wasOpen := b.openUntil.Swap(nowMicros(c)+bs.cooldown) != 0
		b.probing.Store(false)
		if !wasOpen {
			bs.notify()
		}
	}
}

// BreakerOpen reports whether the circuit breaker is currently skipping the
// store: with a [ShardedStore], whether the breaker of any shard is.
func (e *Engine) BreakerOpen() bool {
	now := int64(-1)
	for i := range e.breakers.all {
		if until := e.breakers.all[i].openUntil.Load(); until != 0 {
			if now < 0 {
				now = nowMicros(e.clock)
			}
			if now < until {
				return true
			}
		}
	}
	return false
}
