package observe

import "github.com/quotagate/quotagate/core"

// Verdict is what one budget did in one decision. Its String is the value
// of the outcome label of package core/metrics.
type Verdict uint8

const (
	// Allowed: the budget had room for the request, the request was
	// allowed, and the budget charged it.
	Allowed Verdict = iota
	// Denied: the budget is exhausted and denied the request.
	Denied
	// ShadowDenied: a shadow budget (or any budget of an engine in dry-run
	// mode) would have denied the request; it was let through.
	ShadowDenied
	// FailedOpen: the store could not evaluate the budget (an error, a
	// timeout, an open circuit breaker) and the budget let the request
	// through.
	FailedOpen
	// FailedClosed: the store could not evaluate the budget and the budget,
	// configured to fail closed, denied the request (503 by default).
	FailedClosed
	// NoKey: the budget's key function found no key and the budget denied
	// the request before the store was called.
	NoKey
	// BadCost: the budget's cost function failed and the request was denied
	// before the store was called.
	BadCost
	// CostTooHigh: the request costs more than the budget can ever hold and
	// was denied before the store was called.
	CostTooHigh
	// DeniedElsewhere: the budget had room for the request, but the request
	// was denied by another budget (of the same layer, or of a later,
	// inner layer) or abandoned during its shaping wait, so nothing it
	// charged was kept.
	DeniedElsewhere

	// NumVerdicts is the number of verdicts, for arrays indexed by Verdict.
	NumVerdicts = int(DeniedElsewhere) + 1
)

var outcomeNames = [NumVerdicts]string{
	"allowed", "denied", "shadow_denied", "failed_open", "failed_closed",
	"no_key", "bad_cost", "cost_too_high", "denied_elsewhere",
}

// String returns the verdict's name, e.g. "shadow_denied". The names are
// the values of the outcome label of package core/metrics.
func (o Verdict) String() string {
	if int(o) < NumVerdicts {
		return outcomeNames[o]
	}
	return "unknown"
}

// Classify returns the outcome of res, one of the results the layer being
// observed added to d (the layer argument of
// [core.Observer.ObserveDecision]). The engine observes a layer when the
// request's fate in it is final, so the outcomes of one budget add up to
// the requests it evaluated, and Allowed counts only requests that were
// let through.
//
// When a fail-closed budget denies because the store is unavailable, no
// budget of that layer was evaluated: the fail-closed ones are FailedClosed
// and the others (fail-open and shadow budgets) are FailedOpen.
func Classify(d *core.Decision, res *core.Result) Verdict {
	if res.FailedOpen {
		return FailedOpen
	}
	if res.Unavailable && !res.Local && !d.Allowed && d.Reason == core.ReasonUnavailable {
		if res.Shadow || res.Allowed {
			return FailedOpen
		}
		return FailedClosed
	}
	switch {
	case res.Allowed && !d.Allowed:
		return DeniedElsewhere
	case res.Allowed:
		return Allowed
	case res.Shadow:
		return ShadowDenied
	default:
		return Denied
	}
}

// LayerDenied reports whether the layer being observed is the one that
// denied d: it denied before calling the store (layer is then empty), or
// one of its budgets denied or failed closed. A layer observed after a
// later layer denied the request did not.
func LayerDenied(d *core.Decision, layer []core.Result) bool {
	if d.Allowed {
		return false
	}
	if len(layer) == 0 {
		return true
	}
	for i := range layer {
		switch Classify(d, &layer[i]) {
		case Denied, FailedClosed:
			return true
		}
	}
	return false
}

// DeniedBeforeStore reports the outcome of a decision denied before the
// store was called (no key, a failing cost function, a cost too high), as
// the observer sees it: an empty layer and a denied decision. The budget
// concerned is d.DeniedBy.
func DeniedBeforeStore(d *core.Decision, layer []core.Result) (Verdict, bool) {
	if len(layer) != 0 || d.Allowed {
		return 0, false
	}
	switch d.Reason {
	case core.ReasonNoKey:
		return NoKey, true
	case core.ReasonBadCost:
		return BadCost, true
	case core.ReasonCostTooHigh:
		return CostTooHigh, true
	}
	return 0, false
}

// NearLimit reports whether res, one of the results the layer being
// observed added to an allowed decision d, left at most 1-ratio of its
// budget's capacity: with ratio 0.8 and a quota of 10, the 8th, 9th and
// 10th request of a window are near the limit. Capacity is the quota, or
// the burst of bucket algorithms. Denied, failed and shadow-denied results
// are never near the limit (they have outcomes of their own), nor are the
// results of a denied decision. A ratio <= 0 or > 1 reports false.
func NearLimit(d *core.Decision, res *core.Result, ratio float64) bool {
	if !d.Allowed || ratio <= 0 || ratio > 1 || !res.Allowed || res.FailedOpen {
		return false
	}
	c := res.Limit.Capacity()
	if c <= 0 {
		return false
	}
	return float64(c-res.Remaining) >= ratio*float64(c)
}

// StoreLabels are the store error kinds' short names, the values of the
// kind label of the store error series that core/metrics and
// core/otelmetrics export, indexed by [core.ErrorKind].
var StoreLabels = [core.NumStoreErrorKinds]string{
	core.KindStoreError:    "error",
	core.KindStoreTimeout:  "timeout",
	core.KindStoreCanceled: "canceled",
	core.KindBreakerOpen:   "breaker_open",
	// A store that cannot work as configured: alert on any increase.
	core.KindStoreMisconfigured: "misconfigured",
}
