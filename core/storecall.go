package core

import (
	"context"
	"errors"
	"slices"
	"time"
)

// This file is the engine's store calls on a request's path: a layer's
// take, with the budgets' failure modes when the store fails, the refunds,
// and the errors reported to the observer.

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

// Refund gives back every charge recorded in d, for a request abandoned
// after it was allowed (for example a shaping wait cut short).
func (e *Engine) Refund(ctx context.Context, d *Decision) {
	refundResults(ctx, d.Results)
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
