package core

import "time"

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

// scratch returns n-long item, outcome and rule slices for one store call.
func (d *Decision) scratch(n int) ([]*rule, []Item, []Outcome) {
	if n <= len(d.items) {
		return d.rules[:n], d.items[:n], d.outs[:n]
	}
	return make([]*rule, n), make([]Item, n), make([]Outcome, n)
}

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

func (d *Decision) start() {
	if !d.started {
		d.started = true
		d.Allowed = true
		d.Results = d.buf[:0]
	}
}
