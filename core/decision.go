package core

import (
	"context"
	"time"
	"unsafe"
)

// Reason says why a decision is what it is.
type Reason int

const (
	// ReasonAllowed: every budget allowed the request (or failed open).
	ReasonAllowed Reason = iota
	// ReasonRateLimited: a budget is exhausted. Rendered as 429 with
	// Retry-After by default.
	ReasonRateLimited
	// ReasonCostTooHigh: a computed cost exceeds what a budget can ever
	// hold, so no wait would help. Rendered as 429 without Retry-After. A
	// cost that a scaled budget cannot hold at its current scale, but can
	// at full scale, is ReasonRateLimited instead, with the budget's
	// window as its RetryAfter.
	ReasonCostTooHigh
	// ReasonNoKey: a budget could not key the request and its MissingKey
	// action is to deny, or the key was ambiguous or malformed. Rendered as
	// 401 with WWW-Authenticate for a missing credential, 400 otherwise
	// (see DefaultDeny).
	ReasonNoKey
	// ReasonBadCost: a CostFunc failed or returned a negative cost.
	// Rendered as 400 by default.
	ReasonBadCost
	// ReasonUnavailable: the store could not evaluate a FailClosed budget,
	// or a shaping wait was cut short. Rendered as 503 with Retry-After.
	ReasonUnavailable
	// ReasonOverloaded: the layer's guard ([GuardBy]) shed the request
	// to protect the server, e.g. an adaptive concurrency limit was
	// reached. Rendered as 503 with Retry-After.
	ReasonOverloaded
)

var reasonNames = [...]string{"allowed", "rate_limited", "cost_too_high", "no_key", "bad_cost", "unavailable", "overloaded"}

// String returns the reason's name, e.g. "rate_limited".
func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Result is the outcome of one budget in a decision: the [Item] that was
// evaluated and the store's [Outcome].
type Result struct {
	Item
	Outcome
	// KeyClass is the budget's KeyClass, for observers (never the key).
	KeyClass string
	// Unavailable reports that the main store could not evaluate this
	// budget (an error, a timeout or an open breaker); its failure mode
	// decided instead.
	Unavailable bool
	// FailedOpen reports that the store could not evaluate this budget and
	// the request was let through; Outcome is then unknown (zero).
	FailedOpen bool
	// Local reports that the budget was evaluated on the engine's fallback
	// store because the main store was unavailable.
	Local bool
	// Refunded reports that the charge was given back: because a later
	// layer denied the request, or a CountWhen predicate rejected its
	// status, or, for a Concurrency budget, because the request finished
	// and released its slots (observers see a decision before its release).
	Refunded bool

	eng  *Engine // the engine whose store holds the charge
	rule *rule   // the budget's rule, for its pre-rendered header parts
}

// Decision is the outcome for one request. Adapters keep one Decision per
// request and pass it to every stacked layer; each layer appends its
// budgets' results. The zero value is ready to use.
type Decision struct {
	// Allowed reports whether the request may proceed (after Delay).
	Allowed bool
	// Reason says why.
	Reason Reason
	// Results has one entry per evaluated budget, in layer order.
	// Budgets that ignore the request's method are absent.
	Results []Result
	// DeniedBy names the budget that denied the request, if one did.
	DeniedBy string
	// RetryAfter is, for a denied request, how long until it would pass.
	RetryAfter time.Duration
	// Delay is how long the latest layer asks the request to wait before
	// it proceeds (LeakyBucket shaping).
	Delay time.Duration
	// Err is the error behind a failed-open or failed-closed store call, a
	// missing key or a failed cost function, if any.
	Err error
	// Guard is the state of the guard of the latest guarded layer
	// ([GuardBy]) the request reached: its limit, the requests in
	// flight and its load signal. Zero when no guard was asked.
	Guard GuardState

	started  bool
	detached detached // see releaseSlots
	buf      [4]Result
	// scratch for one layer's store call, so Decide does not allocate
	rules [4]*rule
	items [4]Item
	outs  [4]Outcome
	// places guards hold for direct Decide calls, until Decision.Done
	held []held
	// the layer whose guard admitted the request while the layer's
	// evaluation runs, for abandonAdmission
	admitted *Layer
}

func (d *Decision) start() {
	if !d.started {
		d.started = true
		d.Allowed = true
		d.Results = d.buf[:0]
	}
}

// scratch returns n-long item, outcome and rule slices for one store call.
func (d *Decision) scratch(n int) ([]*rule, []Item, []Outcome) {
	if n <= len(d.items) {
		return d.rules[:n], d.items[:n], d.outs[:n]
	}
	return make([]*rule, n), make([]Item, n), make([]Outcome, n)
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

// abandonAdmission gives back, as not served, the place of a guard that
// admitted the request when the layer's evaluation did not return: code
// of the user's (a key, cost or quota function, or the observer told of a
// denial) panicked, and no end or Done will give it back.
func (d *Decision) abandonAdmission() {
	if l := d.admitted; l != nil {
		d.admitted = nil
		l.guard.Release(false, 0, 0)
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

// Reset clears d for reuse with another request. It clears only what the
// previous request used, so reusing a Decision is cheaper than zeroing one.
func (d *Decision) Reset() {
	clear(d.Results)
	d.Results = nil
	d.Allowed, d.Reason, d.DeniedBy = false, ReasonAllowed, ""
	d.RetryAfter, d.Delay, d.Err = 0, 0, nil
	d.Guard = GuardState{}
	d.held = d.held[:0]
	d.admitted = nil
	d.started, d.detached.parent = false, nil
}
