package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"
)

// MaxBudgetsPerLayer caps how many budgets one layer applies.
const MaxBudgetsPerLayer = 16

// Layer is one middleware's use of an engine: the budgets it applies, in
// order, and what a request costs in each. Create layers at start-up with
// [Engine.Layer]; adapters call [Layer.Decide] per request.
type Layer struct {
	e       *Engine
	names   []string
	costs   []int64    // static cost per budget
	costFns []CostFunc // nil, or a CostFunc per budget
	deny    DenyFunc
	headers HeaderStyle
	skip    func(*Request) bool
	count   func(status int) bool
	extra   map[any]any // router options, read by the adapter
	guard   Guard
	// calls says the layer has a guard, count or the engine's observer:
	// code of the user's that end runs. Kept, not derived, so that end
	// stays within the inliner's budget.
	calls bool
	bound atomic.Pointer[binding]
}

type binding struct {
	rs    *ruleset
	rules []*rule
}

// A LayerOption configures a [Layer].
type LayerOption func(*layerConfig)

type layerConfig struct {
	names    []string
	cost     *int64
	costOf   map[string]int64
	costFn   CostFunc
	costFnOf map[string]CostFunc
	deny     DenyFunc
	headers  *HeaderStyle
	skip     func(*Request) bool
	count    func(status int) bool
	extra    map[any]any
	guard    Guard
}

// Use adds the named budgets to the layer, in order.
func Use(budgets ...string) LayerOption {
	return func(c *layerConfig) { c.names = append(c.names, budgets...) }
}

// Cost sets what a request costs in every budget of the layer (default 1).
// A cost of 0 evaluates and reports the budgets without spending.
func Cost(n int64) LayerOption {
	return func(c *layerConfig) { c.cost = &n }
}

// CostIn sets what a request costs in one budget of the layer.
func CostIn(budget string, n int64) LayerOption {
	return func(c *layerConfig) {
		if c.costOf == nil {
			c.costOf = map[string]int64{}
		}
		c.costOf[budget] = n
	}
}

// CostFrom computes what a request costs in every budget of the layer.
func CostFrom(fn CostFunc) LayerOption {
	return func(c *layerConfig) { c.costFn = fn }
}

// CostFromIn computes what a request costs in one budget of the layer.
func CostFromIn(budget string, fn CostFunc) LayerOption {
	return func(c *layerConfig) {
		if c.costFnOf == nil {
			c.costFnOf = map[string]CostFunc{}
		}
		c.costFnOf[budget] = fn
	}
}

// Deny replaces the engine's denial rendering for this layer.
func Deny(fn DenyFunc) LayerOption {
	return func(c *layerConfig) { c.deny = fn }
}

// Headers replaces the engine's header style for this layer.
func Headers(style HeaderStyle) LayerOption {
	return func(c *layerConfig) { c.headers = &style }
}

// Skip makes the layer pass the requests fn reports true for straight to
// the handler: no budget is evaluated or charged, no store is called, and
// the response gets no rate-limit header fields from this layer. Use it for
// health checks, internal callers or allowlisted keys. fn runs on every
// request before anything else the layer does; it must be quick and safe
// for concurrent use.
//
// The adapters also take their router's own skip predicate (nethttp.Skip,
// ginmw.Skip, echomw.Skipper, fibermw.Next), which runs before the
// request is even read into a [Request] and so costs less.
func Skip(fn func(r *Request) bool) LayerOption {
	return func(c *layerConfig) { c.skip = fn }
}

// CountWhen makes the layer keep a request's charges only when fn reports
// true for the status the handler answered with; otherwise, after the
// handler returns, the layer gives back what it charged (as [Engine.Refund]
// does) in every one of its budgets. The main use is brute-force
// protection on a login route that counts only failures:
//
//	core.CountWhen(func(status int) bool { return status == 401 || status == 403 })
//
// The request is still evaluated first and denied when a budget is
// exhausted, and the header fields written before the handler ran show
// the charge. A handler that panics keeps its charges. Charges of other
// layers are not affected. fn must be quick and safe for concurrent use.
func CountWhen(fn func(status int) bool) LayerOption {
	return func(c *layerConfig) { c.count = fn }
}

// Layer returns a layer applying the budgets named with [Use], validated
// against the engine's budgets; the error lists every problem.
func (e *Engine) Layer(opts ...LayerOption) (*Layer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l, problems := newLayer(e.rules.Load(), e.headers, e.deny, opts)
	if err := configError(problems); err != nil {
		return nil, err
	}
	l.e = e
	l.calls = l.guard != nil || l.count != nil || e.observer != nil
	e.layers = append(e.layers, l)
	return l, nil
}

// ValidateLayer reports every problem [Engine.Layer] would report for a
// layer made with opts on an engine of budgets, and every problem of the
// budgets themselves ([ValidateBudgets]), as a *ConfigError; nil when
// both are valid. It builds no engine and needs no store.
func ValidateLayer(budgets []Budget, opts ...LayerOption) error {
	rs, problems := compileRules(budgets, FailOpen, true)
	if len(problems) == 0 {
		_, problems = newLayer(rs, HeadersIETF, DefaultDeny, opts)
	}
	return configError(problems)
}

// newLayer builds the layer of opts over the budgets of rs, with the
// engine's default header style and denial, and lists its problems.
func newLayer(rs *ruleset, headers HeaderStyle, deny DenyFunc, opts []LayerOption) (*Layer, []error) {
	var c layerConfig
	for _, o := range opts {
		o(&c)
	}
	l := &Layer{names: c.names, deny: c.deny, headers: headers,
		skip: c.skip, count: c.count, extra: c.extra, guard: c.guard}
	if l.deny == nil {
		l.deny = deny
	}
	if c.headers != nil {
		l.headers = *c.headers
	}
	var problems []error
	if len(c.names) == 0 && c.guard == nil {
		problems = append(problems, errors.New("layer: no budgets (use core.Use) and no guard (core.GuardBy)"))
	}
	if len(c.names) > MaxBudgetsPerLayer {
		problems = append(problems, fmt.Errorf("layer: %d budgets exceed the maximum of %d", len(c.names), MaxBudgetsPerLayer))
	}
	if l.headers < HeadersIETF || l.headers > HeadersNone {
		problems = append(problems, fmt.Errorf("layer: unknown header style %d", int(l.headers)))
	}
	seen := map[string]bool{}
	l.costs = make([]int64, len(c.names))
	for i, n := range c.names {
		if seen[n] {
			problems = append(problems, fmt.Errorf("layer: budget %q is listed twice", n))
		}
		seen[n] = true
		l.costs[i] = 1
		if c.cost != nil {
			l.costs[i] = *c.cost
		}
		if v, ok := c.costOf[n]; ok {
			l.costs[i] = v
		}
		fn := c.costFn
		if f, ok := c.costFnOf[n]; ok {
			fn = f
		}
		if fn != nil {
			if l.costFns == nil {
				l.costFns = make([]CostFunc, len(c.names))
			}
			l.costFns[i] = fn
		}
	}
	for n := range c.costOf {
		if !seen[n] {
			problems = append(problems, fmt.Errorf("layer: cost set for budget %q, which the layer does not use", n))
		}
	}
	for n := range c.costFnOf {
		if !seen[n] {
			problems = append(problems, fmt.Errorf("layer: cost function set for budget %q, which the layer does not use", n))
		}
	}
	problems = append(problems, l.validate(rs)...)
	return l, problems
}

// MustLayer is Layer for configurations known to be valid; it panics on
// error. Use it at start-up only.
func (e *Engine) MustLayer(opts ...LayerOption) *Layer {
	l, err := e.Layer(opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// validate checks l's budgets and static costs against rs.
func (l *Layer) validate(rs *ruleset) []error {
	var problems []error
	for i, n := range l.names {
		r, ok := rs.byName[n]
		if !ok {
			problems = append(problems, fmt.Errorf("layer: unknown budget %q", n))
			continue
		}
		cost := l.costs[i]
		if cost < 0 {
			problems = append(problems, fmt.Errorf("budget %q: cost %d is negative", n, cost))
		} else if r.QuotaFunc == nil && r.static.Quota > 0 && cost > r.static.Capacity() {
			problems = append(problems, fmt.Errorf("budget %q: cost %d exceeds what the budget can ever hold (%d)", n, cost, r.static.Capacity()))
		}
	}
	return problems
}

// Budgets returns the names of the layer's budgets, in order.
func (l *Layer) Budgets() []string { return append([]string(nil), l.names...) }

// Engine returns the layer's engine.
func (l *Layer) Engine() *Engine { return l.e }

func (l *Layer) binding() *binding {
	rs := l.e.rules.Load()
	if b := l.bound.Load(); b != nil && b.rs == rs {
		return b
	}
	b := &binding{rs: rs, rules: make([]*rule, 0, len(l.names))}
	for _, n := range l.names {
		if r := rs.byName[n]; r != nil { // Reload guarantees presence
			b.rules = append(b.rules, r)
		}
	}
	l.bound.Store(b)
	return b
}

// scratch holds one store call's items, outcomes and their rules.
type scratch struct {
	rules []*rule
	items []Item
	outs  []Outcome
}

// Decide evaluates the layer's budgets for r and records the outcome in d,
// which carries the results of earlier (outer) layers for the same request.
// If this layer denies, the charges of earlier layers are refunded, so
// stacked layers are all-or-nothing too. Decide does nothing when d is
// already denied. The engine's observer is told at once.
//
// The router adapters run the same decision (through package core/adapter);
// call Decide yourself to limit work that does not arrive through a router
// (a queue consumer, a gRPC handler, an outgoing call). A request the
// layer's [Skip] predicate skips is left as it is: allowed, with no result
// of this layer. [CountWhen] needs a response status, so only the adapters
// apply it. To answer a denial in HTTP terms, call [DefaultDeny] (or the
// DenyFunc you configured) with the Decision. A zero Decision is ready to
// use; Reset it before reusing it for another request.
//
// An allowed decision holds the slots of its [Concurrency] budgets until
// [Decision.Done] gives them back: call it (defer d.Done(ctx, 0)) when
// the admitted work has finished, before Reset. The adapters do it when
// the handler returns.
//
// Decide never panics because of configuration and never blocks beyond the
// store call; a LeakyBucket delay is returned in d.Delay, for the caller to
// wait (see [Layer.Wait]).
//
// A layer with a guard ([GuardBy]) that lets the request through holds
// its place until [Decision.Done]: call Done when the work is over.
func (l *Layer) Decide(r *Request, d *Decision) {
	if l.guard != nil {
		defer d.abandonAdmission() // when begin panics
	}
	st := l.begin(r, d)
	d.admitted = nil
	if !st.Observed {
		l.observe(r, d, st)
	}
	l.hold(d, st)
}

// begin decides like Decide, but tells the observer only about a denial:
// an allowed decision is observed by end, when the request leaves the
// layer and its fate in later layers is known.
func (l *Layer) begin(r *Request, d *Decision) step {
	d.start()
	if l.skip != nil && l.skip(r) {
		return step{Skipped: true, Observed: true}
	}
	if !d.Allowed {
		return step{Start: len(d.Results), End: len(d.Results), Observed: true}
	}
	var st step // the guard's admission, when the layer has one
	if l.guard != nil {
		var shed bool
		if st, shed = l.admit(r, d); shed {
			return st
		}
	}
	d.Delay = 0
	b := l.binding()
	var sc scratch
	sc.rules, sc.items, sc.outs = d.scratch(len(b.rules))
	st.Start = len(d.Results)
	st.End = st.Start
	n, ok := l.gather(r, d, b, &sc)
	if !ok || n == 0 {
		return l.decided(r, d, st)
	}
	var t0 time.Duration
	if l.e.observer != nil {
		t0 = monotonic()
	}
	l.e.take(r, &sc, n, d)
	st.End = len(d.Results)
	for i := st.Start; i < st.End && !st.Slots; i++ {
		st.Slots = holdsSlot(&d.Results[i])
	}
	if l.e.observer != nil {
		st.Latency = monotonic() - t0
	}
	return l.decided(r, d, st)
}

// decided refunds earlier layers when this one denied, and then tells the
// observer, since a denial is final.
func (l *Layer) decided(r *Request, d *Decision, st step) step {
	if d.Allowed {
		return st
	}
	// Earlier layers' charges, and this layer's own (a shadow budget or a
	// local fallback take may have charged).
	refundResults(r.ctx(), d.Results)
	l.observe(r, d, st)
	st.Observed = true
	return st
}

// end finishes the layer's sequence once the handler answered with status
// (0 when the adapter does not know it): it releases the guard's place,
// applies CountWhen, tells the observer about a decision it was not told
// about yet, and gives back the layer's concurrency slots. The steps after
// the guard's are deferred, so that a panic in code of the user's (a
// guard's Release, an adaptive limiter's Signal, CountWhen, the observer)
// loses no slot and skips no later step: the panic goes on up once they
// are done.
func (l *Layer) end(r *Request, d *Decision, st step, status int) {
	if l.calls || st.Slots { // else there is nothing to do
		l.finish(r, d, st, status)
	}
}

// finish is end for a layer that calls code of the user's or holds slots.
func (l *Layer) finish(r *Request, d *Decision, st step, status int) {
	if !l.calls {
		l.freeSlots(r, d, st) // no code of the user's runs: no defer to pay for
		return
	}
	defer l.freeSlots(r, d, st)
	defer l.settle(r, d, st, status)
	l.release(d, st, status)
}

// settle applies CountWhen and tells the observer about a decision it was
// not told about yet.
func (l *Layer) settle(r *Request, d *Decision, st step, status int) {
	if !st.Observed && (d.Allowed || st.End > st.Start) {
		// A layer that evaluated nothing has nothing to report about a
		// denial made elsewhere.
		defer l.observe(r, d, st)
	}
	if l.count != nil && d.Allowed && status != 0 && !l.count(status) && st.End <= len(d.Results) {
		refundResults(context.WithoutCancel(r.ctx()), d.Results[st.Start:st.End])
	}
}

// freeSlots gives back the layer's concurrency slots once the request has
// left it (after the observer saw the decision as it was taken). Only a
// layer that took slots reads d.Results here, so a layer without any does
// not touch a decision that a handler kept running past the layer
// (http.TimeoutHandler between layers) may still be changing.
func (l *Layer) freeSlots(r *Request, d *Decision, st step) {
	if st.Slots && st.End <= len(d.Results) {
		d.releaseSlots(r.ctx(), d.Results[st.Start:st.End])
	}
}

// holdsSlot reports whether x holds concurrency slots not yet given back.
func holdsSlot(x *Result) bool {
	return x.Limit.Algorithm == Concurrency && x.Charged && !x.Refunded && x.Cost > 0 && x.eng != nil
}

// releaseSlots gives back the concurrency slots that res (results of d)
// holds, each exactly once: a released result is marked Refunded, as a
// refunded one is, so neither a refund nor another release gives it back
// again. It runs after ctx may have ended (a client that went away), so
// the store calls do not inherit ctx's cancellation.
func (d *Decision) releaseSlots(ctx context.Context, res []Result) {
	n, first := 0, 0
	for i := range res {
		if holdsSlot(&res[i]) {
			if n == 0 {
				first = i
			}
			n++
		}
	}
	if n == 0 {
		return
	}
	if ctx.Done() != nil {
		d.detached.parent = ctx // context.WithoutCancel(ctx), without allocating; Reset clears it
		ctx = &d.detached
	}
	if n > 1 {
		refundResults(ctx, res, Concurrency)
		return
	}
	// One slot, the common case: refund it in place, without building
	// the item lists refundOwn does (no allocation).
	x := &res[first]
	e, store, op := x.eng, x.eng.store, "refund"
	if x.Local {
		store, op = e.fallback, "fallback refund"
	}
	err := store.Refund(ctx, unsafe.Slice(&x.Item, 1), unsafe.Slice(&x.Outcome, 1))
	x.Refunded, x.Charged = true, false
	x.Remaining += x.Cost
	if err != nil {
		e.reportStoreError(op, err)
	}
}

// Done ends a request decided by [Layer.Decide] outside a router adapter
// (the adapters do this themselves when the handler returns): it gives
// back the concurrency slots d holds ([Concurrency]) and the places the
// layers' guards hold ([GuardBy]), with the time since Decide and status
// (0 if unknown) as each guard's latency sample. Call it once the work the
// decision admitted is over, whatever its outcome, typically with defer
// right after Decide; until then the request counts as in flight. Every
// other charge is kept. A second call gives nothing back again. A slot
// whose release fails (a store error, reported to the observer) stays held
// until the store reclaims it (see [Concurrency]). ctx's cancellation does
// not cut the release short.
func (d *Decision) Done(ctx context.Context, status int) {
	d.releaseSlots(ctx, d.Results)
	d.releaseHeld(status)
}

// releaseHeld gives back the places the layers' guards hold, innermost
// first, each once. When a guard's Release panics, the others are still
// given back before the panic goes on up.
func (d *Decision) releaseHeld(status int) {
	defer func() {
		if len(d.held) > 0 { // a Release panicked
			d.releaseHeld(status)
		}
	}()
	for n := len(d.held); n > 0; n = len(d.held) {
		h := d.held[n-1]
		d.held = d.held[:n-1]
		h.l.release(d, step{Guarded: true, Entered: h.entered}, status)
	}
}

// detached is its parent context without the parent's cancellation or
// deadline, as context.WithoutCancel returns; a Decision keeps one so that
// giving back slots on a cancellable request context does not allocate.
type detached struct{ parent context.Context }

func (c *detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *detached) Done() <-chan struct{}       { return nil }
func (c *detached) Err() error                  { return nil }
func (c *detached) Value(key any) any           { return c.parent.Value(key) }

func (l *Layer) observe(r *Request, d *Decision, st step) {
	if l.e.observer != nil && st.End <= len(d.Results) {
		l.e.observer.ObserveDecision(r, d, d.Results[st.Start:st.End], st.Latency)
	}
}

// gather builds the items of this layer's budgets for r into sc. It returns
// false after recording a denial in d.
func (l *Layer) gather(r *Request, d *Decision, b *binding, sc *scratch) (int, bool) {
	n := 0
	for i, ru := range b.rules {
		if ignores(ru.IgnoreMethods, r.Method) {
			continue
		}
		// A shadow budget never denies: when it cannot key or cost the
		// request, it is left out of the decision (the error is reported).
		shadow := ru.Shadow || l.e.dryRun
		key, err := ru.Key(r)
		if err != nil {
			l.e.reportBudgetError(ru.Name, err)
			// Only a missing key may be skipped or keyed otherwise; a
			// malformed credential (two of them) is denied, and a garbled
			// key (over-long, repeated) is denied or keyed otherwise, never
			// skipped, so a client cannot escape its key's budget by
			// garbling it.
			action := ru.MissingKey
			if !errors.Is(err, ErrNoKey) || (action == MissingKeySkip && errors.Is(err, ErrBadKey)) {
				action = MissingKeyDeny
			}
			switch action {
			case MissingKeySkip:
				continue
			case MissingKeyFallback:
				if key, err = ru.FallbackKey(r); err == nil {
					key = fallbackKeyPrefix + key
				}
			}
			if err != nil {
				if shadow {
					continue
				}
				deny1(d, ReasonNoKey, ru.Name, err)
				return 0, false
			}
		}
		lim := &ru.static
		if ru.QuotaFunc != nil {
			resolved, err := ru.resolve(r, key)
			if err != nil {
				l.e.reportBudgetError(ru.Name, err)
			}
			lim = &resolved
		}
		full := lim
		if ru.Scale != nil {
			scaled := scaleLimit(*lim, ru.Scale.Scale())
			lim = &scaled
		}
		cost := l.costs[i]
		if l.costFns != nil && l.costFns[i] != nil {
			c, err := l.costFns[i](r)
			if err == nil && c < 0 {
				err = fmt.Errorf("negative cost %d", c)
			}
			if err != nil {
				err = fmt.Errorf("budget %q: computing cost: %w", ru.Name, err)
				l.e.reportBudgetError(ru.Name, err)
				if shadow {
					continue
				}
				deny1(d, ReasonBadCost, ru.Name, err)
				return 0, false
			}
			cost = c
		}
		if cost > lim.Capacity() {
			err := fmt.Errorf("budget %q: request costs %d but the budget holds at most %d", ru.Name, cost, lim.Capacity())
			l.e.reportBudgetError(ru.Name, err)
			if shadow {
				continue
			}
			if ru.Scale != nil && cost <= full.Capacity() {
				// The budget holds the cost at a higher scale: the request
				// may pass later, so it is told when to try again.
				deny1(d, ReasonRateLimited, ru.Name, err)
				d.RetryAfter = ru.Window
				return 0, false
			}
			deny1(d, ReasonCostTooHigh, ru.Name, err)
			return 0, false
		}
		sc.rules[n] = ru
		it := &sc.items[n]
		it.Budget, it.Key, it.Limit, it.Cost, it.Shadow = ru.Name, key, *lim, cost, shadow
		n++
	}
	return n, true
}

// resolve returns the rule's limit for key under its QuotaFunc: the
// resolved quota's limit, or its static limit with an error saying why
// the resolved one is not used.
func (ru *rule) resolve(r *Request, key string) (Limit, error) {
	q, err := ru.QuotaFunc(r, key)
	switch {
	case err != nil:
		return ru.static, fmt.Errorf("resolving quota: %w", err)
	case q == ru.static.Quota:
		return ru.static, nil
	}
	resolved := ru.limitFor(max(q, 1))
	if err := resolved.Validate(); err != nil {
		return ru.static, fmt.Errorf("resolved quota %d: %w; using %d", q, err, ru.Quota)
	}
	return resolved, nil
}

// fallbackKeyPrefix puts keys from a FallbackKey in a space of their own, so
// a fallback key (an IP) never shares a budget with a primary key (a tenant)
// that happens to be spelled the same.
const fallbackKeyPrefix = "\x00fallback\x00"

func ignores(methods []string, m string) bool {
	for _, x := range methods {
		if x == m {
			return true
		}
	}
	return false
}

// deny1 records a denial that happened before the store was called.
func deny1(d *Decision, reason Reason, budget string, err error) {
	d.Allowed, d.Reason, d.DeniedBy, d.Err = false, reason, budget, err
}

// take runs the store call for sc's n items, applying failure modes, and
// appends the results to d.
func (e *Engine) take(r *Request, sc *scratch, n int, d *Decision) {
	items, outs := sc.items[:n], sc.outs[:n]
	ctx := r.ctx()
	var err error
	b := &e.breakers.all[0]
	if e.sharded != nil {
		b = e.breakers.of(e.sharded.Shard(items))
	}
	if e.breakers.allow(b, e.clock) {
		err = e.store.Take(ctx, items, outs)
		e.breakers.record(b, err, e.clock)
		if err == nil && e.log.failing.Load() && !e.breakers.failing() {
			e.log.ok(e.clock)
		}
	} else {
		err = ErrBreakerOpen
	}
	base := len(d.Results)
	d.Results = slices.Grow(d.Results, len(items))[:base+len(items)]
	for i := range items {
		res := &d.Results[base+i] // filled field by field: no temporary
		res.Item, res.Outcome = items[i], outs[i]
		res.KeyClass, res.eng, res.rule = sc.rules[i].KeyClass, e, sc.rules[i]
		res.Unavailable, res.FailedOpen, res.Local, res.Refunded = false, false, false, false
	}
	if err != nil {
		e.failed(ctx, sc, d.Results[base:], err, d)
	}
	// All-or-nothing across this layer's results.
	allowed := true
	for i := base; i < len(d.Results); i++ {
		res := &d.Results[i]
		if !res.Allowed && !res.Shadow && !res.FailedOpen {
			allowed = false
			if d.DeniedBy == "" || res.RetryAfter > d.RetryAfter {
				d.DeniedBy, d.RetryAfter = res.Budget, res.RetryAfter
			}
		}
		if res.Allowed && !res.Shadow && res.Delay > d.Delay {
			d.Delay = res.Delay // a shadow budget never makes a request wait
		}
	}
	if !allowed {
		d.Allowed = false
		if d.Reason == ReasonAllowed {
			d.Reason = ReasonRateLimited
		}
		d.Delay = 0
	}
}

// failed applies the budgets' failure modes after the store failed.
func (e *Engine) failed(ctx context.Context, sc *scratch, res []Result, err error, d *Decision) {
	if err != ErrBreakerOpen {
		err = &StoreError{Op: "take", Err: err}
	}
	e.reportError(ClassifyStoreError(err), "", err)
	e.log.fail(e.clock, "take", err, func() string { return modesOf(sc.rules[:len(res)]) })
	d.Err = err
	var local []int // indexes into res of FailLocal budgets
	for i := range res {
		ru := sc.rules[i]
		res[i].Outcome = Outcome{}
		res[i].Unavailable = true
		switch ru.mode {
		case FailClosed:
			if res[i].Shadow {
				res[i].FailedOpen = true
				continue
			}
			if d.Reason == ReasonAllowed {
				d.Reason, d.DeniedBy = ReasonUnavailable, ru.Name
				d.RetryAfter = time.Duration(e.breakers.cooldown) * time.Microsecond
			}
		case FailLocal:
			local = append(local, i)
		default:
			res[i].FailedOpen = true
			res[i].Allowed = true
		}
	}
	if d.Reason == ReasonUnavailable {
		for i := range res {
			if !res[i].Shadow {
				res[i].FailedOpen = false
			}
		}
		return
	}
	if len(local) == 0 {
		return
	}
	items, outs := make([]Item, len(local)), make([]Outcome, len(local))
	for j, i := range local {
		items[j] = res[i].Item
	}
	if lerr := e.fallback.Take(ctx, items, outs); lerr != nil {
		e.reportStoreError("fallback take", lerr)
		for _, i := range local {
			res[i].FailedOpen, res[i].Allowed = true, true
		}
		return
	}
	for j, i := range local {
		res[i].Outcome = outs[j]
		res[i].Local = true
	}
}

// refundResults gives back every charged, not yet refunded result in res, each in
// the store of the engine that charged it (stacked layers may belong to
// different engines). Denials are the rare path; this allocates.
//
// only, when given, restricts the refund to the results of that algorithm
// (releaseSlots gives back concurrency slots only).
func refundResults(ctx context.Context, res []Result, only ...Algorithm) {
	var engines []*Engine
	for i := range res {
		if x := &res[i]; x.Charged && !x.Refunded && x.eng != nil && !slices.Contains(engines, x.eng) {
			engines = append(engines, x.eng)
		}
	}
	for _, e := range engines {
		e.refundOwn(ctx, res, only)
	}
}

// refundOwn refunds the results of res that e charged (of the algorithms
// in only, when it is not empty).
func (e *Engine) refundOwn(ctx context.Context, res []Result, only []Algorithm) {
	var main, local scratch
	for i := range res {
		x := &res[i]
		if !x.Charged || x.Refunded || x.Cost == 0 || x.eng != e {
			continue
		}
		if len(only) > 0 && !slices.Contains(only, x.Limit.Algorithm) {
			continue
		}
		sc := &main
		if x.Local {
			sc = &local
		}
		sc.items = append(sc.items, x.Item)
		sc.outs = append(sc.outs, x.Outcome)
		x.Refunded, x.Charged = true, false
		x.Remaining += x.Cost
		if t := x.Limit.Interval(); t > 0 { // a bucket is full again sooner
			x.Reset = max(0, x.Reset-time.Duration(x.Cost*t)*time.Microsecond)
		}
	}
	if len(main.items) > 0 {
		if err := e.store.Refund(ctx, main.items, main.outs); err != nil {
			e.reportStoreError("refund", err)
		}
	}
	if len(local.items) > 0 && e.fallback != nil {
		if err := e.fallback.Refund(ctx, local.items, local.outs); err != nil {
			e.reportStoreError("fallback refund", err)
		}
	}
}

func (e *Engine) reportError(kind ErrorKind, budget string, err error) {
	if e.observer != nil {
		e.observer.ObserveError(kind, budget, err)
	}
}

// reportBudgetError reports an error concerning one budget: a missing key
// when it wraps ErrNoKey, a budget error otherwise.
func (e *Engine) reportBudgetError(budget string, err error) {
	kind := KindBudgetError
	if errors.Is(err, ErrNoKey) {
		kind = KindMissingKey
	}
	e.reportError(kind, budget, err)
}

func (e *Engine) reportStoreError(op string, err error) {
	e.reportError(ClassifyStoreError(err), "", &StoreError{Op: op, Err: err})
}

// Refund gives back every charge recorded in d, for a request abandoned
// after it was allowed (for example a shaping wait cut short).
func (e *Engine) Refund(ctx context.Context, d *Decision) {
	refundResults(ctx, d.Results)
}

// Wait blocks for d.Delay, the shaping delay of the latest layer. If ctx
// ends first, it refunds every charge of d, marks d denied with
// ReasonUnavailable and returns ctx.Err().
func (l *Layer) Wait(ctx context.Context, d *Decision) error {
	if d.Delay <= 0 {
		return nil
	}
	if err := sleep(ctx, d.Delay); err != nil {
		abandon(ctx, d, err)
		return err
	}
	d.Delay = 0
	return nil
}

// sleep waits for delay, or returns ctx's error if it ends first.
func sleep(ctx context.Context, delay time.Duration) error {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abandon refunds every charge of d, whose shaping wait ended with err,
// and marks it denied with ReasonUnavailable.
func abandon(ctx context.Context, d *Decision, err error) {
	refundResults(context.WithoutCancel(ctx), d.Results)
	d.Allowed, d.Reason, d.Delay = false, ReasonUnavailable, 0
	d.RetryAfter = time.Second
	d.Err = err
}
