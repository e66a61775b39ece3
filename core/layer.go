package core

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// This file is a layer's type, its options and its construction. What a
// layer does with a request is in sequence.go ([Layer.Serve]), decide.go
// ([Layer.Decide]) and end.go.

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

// Attach returns a layer option that attaches v to the layer under key,
// for an adapter's own options (a router-native skip predicate or denial
// handler). Use an unexported type as key, as for context.WithValue. The
// adapter reads it back with [Layer.Value] when it builds its middleware.
func Attach(key, v any) LayerOption {
	return func(c *layerConfig) {
		if c.extra == nil {
			c.extra = map[any]any{}
		}
		c.extra[key] = v
	}
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

// Value returns what an [Attach] option attached to l under key, or nil.
func (l *Layer) Value(key any) any { return l.extra[key] }

// OptionValue returns what an [Attach] option among opts attaches under
// key, or nil, without building a layer: for a constructor that reads one
// of its own options before it can build the layer (core/adapter.LimitBy
// names its budget after its BudgetName option).
func OptionValue(opts []LayerOption, key any) any {
	var c layerConfig
	for _, o := range opts {
		o(&c)
	}
	return c.extra[key]
}
