package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// This file is the engine's read access for inspection tools (package
// core/inspect): what is configured, and what a key's budgets hold now.
// Nothing here runs on the request path.

// LayerInfo describes one layer of an engine, for inspection tools.
type LayerInfo struct {
	// Budgets are the names of the budgets the layer spends, in order.
	Budgets []string
	// Costs are what a request costs in each budget, in the order of
	// Budgets: the static cost, or -1 when a CostFunc computes it per
	// request.
	Costs []int64
	// Skips reports that the layer has a Skip predicate.
	Skips bool
	// CountsWhen reports that the layer keeps charges only for some
	// response statuses (CountWhen).
	CountsWhen bool
}

// Budgets returns a copy of every budget of e as currently configured,
// sorted by name. A budget's FailureMode is the mode in force (the
// engine's when the budget inherits it), never FailInherit.
func (e *Engine) Budgets() []Budget {
	rs := e.rules.Load()
	out := make([]Budget, 0, len(rs.byName))
	for _, r := range rs.byName {
		b := r.Budget
		b.FailureMode = r.mode
		b.IgnoreMethods = slices.Clone(b.IgnoreMethods)
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Budget) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Layers describes every layer created from e with [Engine.Layer], in the
// order they were created. Middleware constructors create one layer each.
func (e *Engine) Layers() []LayerInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]LayerInfo, len(e.layers))
	for i, l := range e.layers {
		info := LayerInfo{
			Budgets:    slices.Clone(l.names),
			Costs:      slices.Clone(l.costs),
			Skips:      l.skip != nil,
			CountsWhen: l.count != nil,
		}
		for j := range info.Costs {
			if l.costFns != nil && l.costFns[j] != nil {
				info.Costs[j] = -1
			}
		}
		out[i] = info
	}
	return out
}

// PeekResult is what [Engine.Peek] found for one budget.
type PeekResult struct {
	// Result holds the budget's item (its resolved Limit, Cost 0) and its
	// state as a cost-0 evaluation sees it: Remaining, and Reset, the time
	// until the budget is full again.
	Result
	// QuotaErr is the error of the budget's QuotaFunc, if it failed; Limit
	// then holds the static quota, as a decision would use.
	QuotaErr error
}

// Peek reads what every budget of e (or the named ones, when names are
// given) holds for key now, charging nothing. The quota is resolved as a
// decision would resolve it, by the budget's QuotaFunc called with a
// Request that carries only ctx: a resolver that needs more of the request
// fails, and the static quota is used (the error is in QuotaErr).
//
// Peek only reads: the store must implement [Peeker] (the memory store
// and the Redis store do), and Peek returns an error for a store that
// does not, rather than take at cost 0 and let the store write. The
// circuit breaker is neither consulted nor changed, and the observer is
// not told.
//
// A key is the partition a key function returns (for example
// "203.0.113.7" for keyfunc.PeerIP, or a tenant id); a budget that never
// keys requests that way simply shows a full budget.
func (e *Engine) Peek(ctx context.Context, key string, names ...string) ([]PeekResult, error) {
	rs := e.rules.Load()
	var rules []*rule
	if len(names) == 0 {
		for _, r := range rs.byName {
			rules = append(rules, r)
		}
		slices.SortFunc(rules, func(a, b *rule) int { return strings.Compare(a.Name, b.Name) })
	} else {
		for _, n := range names {
			r, ok := rs.byName[n]
			if !ok {
				return nil, fmt.Errorf("quotagate: peek: unknown budget %q", n)
			}
			rules = append(rules, r)
		}
	}
	for i := range rules {
		if slices.Index(rules, rules[i]) != i {
			return nil, fmt.Errorf("quotagate: peek: budget %q is named twice", rules[i].Name)
		}
	}
	req := &Request{Context: ctx}
	out := make([]PeekResult, len(rules))
	items := make([]Item, len(rules))
	for i, r := range rules {
		lim := r.static
		if r.QuotaFunc != nil {
			lim, out[i].QuotaErr = r.resolve(req, key)
		}
		if r.Scale != nil {
			lim = scaleLimit(lim, r.Scale.Scale())
		}
		items[i] = Item{Budget: r.Name, Key: key, Limit: lim}
	}
	p, ok := e.store.(Peeker)
	if !ok {
		return nil, fmt.Errorf("quotagate: peek: the store (%T) cannot read state without writing: it does not implement core.Peeker", e.store)
	}
	outs := make([]Outcome, len(items))
	if err := p.Peek(ctx, items, outs); err != nil {
		return nil, &StoreError{Op: "peek", Err: err}
	}
	for i := range out {
		out[i].Item = items[i]
		out[i].Outcome = outs[i]
		out[i].KeyClass = rules[i].KeyClass
		out[i].Charged = false
	}
	return out, nil
}
