package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is a layer's decision for one request ([Layer.Decide], and
// step 2 of [Layer.Serve]): its guard's admission (guard.go), the items of
// its budgets, the store call (storecall.go), all-or-nothing across
// stacked layers, and the shaping wait a decision may ask for.

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

// step is what one layer's decision left for the rest of its sequence:
// the layer's results are d.Results[Start:End], the store call took
// Latency, and Observed says whether the observer was told already (a
// denial is final at once; an allowed decision is observed when the
// request leaves the layer).
type step struct {
	Start, End int
	Latency    time.Duration
	// Entered is when the layer's guard admitted the request (core's
	// monotonic clock), or 0 when the guard did not ask for the request's
	// latency.
	Entered  time.Duration
	Observed bool
	// Skipped reports that the layer's Skip predicate passed the request
	// through: nothing was decided, nothing is to be written.
	Skipped bool
	// Guarded reports that the layer's guard admitted the request; the
	// layer's end releases it.
	Guarded bool
	// Slots reports that the layer's decision took concurrency slots,
	// which end gives back.
	Slots bool
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

type binding struct {
	rs    *ruleset
	rules []*rule
}

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

func ignores(methods []string, m string) bool {
	for _, x := range methods {
		if x == m {
			return true
		}
	}
	return false
}

// fallbackKeyPrefix puts keys from a FallbackKey in a space of their own, so
// a fallback key (an IP) never shares a budget with a primary key (a tenant)
// that happens to be spelled the same.
const fallbackKeyPrefix = "\x00fallback\x00"

// deny1 records a denial that happened before the store was called.
func deny1(d *Decision, reason Reason, budget string, err error) {
	d.Allowed, d.Reason, d.DeniedBy, d.Err = false, reason, budget, err
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

// holdsSlot reports whether x holds concurrency slots not yet given back.
func holdsSlot(x *Result) bool {
	return x.Limit.Algorithm == Concurrency && x.Charged && !x.Refunded && x.Cost > 0 && x.eng != nil
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

func (l *Layer) observe(r *Request, d *Decision, st step) {
	if l.e.observer != nil && st.End <= len(d.Results) {
		l.e.observer.ObserveDecision(r, d, d.Results[st.Start:st.End], st.Latency)
	}
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
