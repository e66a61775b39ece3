package core

import "time"

// This file is a budget's configuration ([Budget]). Its enumerated
// settings are in enums.go, the limit it resolves to for a key in
// limit.go, and its validation in validate.go.

// Budget is a named limit. Budgets are given to [New] by value; the engine
// keeps its own copy, validated once.
type Budget struct {
	// Name identifies the budget in layers, headers, metrics and store keys,
	// e.g. "t_mutate". Printable ASCII (0x20-0x7E), unique per engine.
	Name string
	// Algorithm selects the counting method; the zero value is FixedWindow.
	Algorithm Algorithm
	// Quota is how many units a key may spend per Window (the reference
	// quota when QuotaFunc is set). Must be positive.
	Quota int64
	// Window is the period the quota applies to: a positive whole number of
	// milliseconds. For Concurrency it is the lease of a slot instead (see
	// Concurrency).
	Window time.Duration
	// Burst is the bucket capacity of TokenBucket (default Quota) and
	// LeakyBucket (default 1) budgets. Other algorithms must leave it 0.
	Burst int64
	// MaxWait is how long a LeakyBucket request may wait for its slot.
	// Required (positive) for LeakyBucket, 0 for the others.
	MaxWait time.Duration
	// Key derives the partition key. Required.
	Key KeyFunc
	// KeyClass names the kind of key for observers and metrics ("ip",
	// "tenant", ...). Keys themselves are never reported. Default "custom".
	KeyClass string
	// MissingKey says what happens when Key fails. Default MissingKeyDeny.
	MissingKey MissingKey
	// FallbackKey keys requests Key cannot, when MissingKey is
	// MissingKeyFallback.
	FallbackKey KeyFunc
	// IgnoreMethods lists methods this budget neither evaluates, charges
	// nor reports, e.g. GET, HEAD and OPTIONS for a write budget. Methods
	// are case-sensitive (RFC 9110): each must be a method token, a
	// standard method in upper case, and listed once; New reports any
	// other spelling rather than let it silently match nothing.
	IgnoreMethods []string
	// QuotaFunc, when set, resolves the quota per request and key (by tier,
	// by plan, overrides); Quota is then the fallback used when it
	// fails. A changed quota takes effect at the next request: stored state
	// never embeds the quota, so the window algorithms admit more at once
	// after a raise and deny at once after a cut, and a token bucket with
	// the default burst keeps the spent fraction of its bucket.
	QuotaFunc QuotaFunc
	// Shadow makes the budget evaluate and count but never deny; what it
	// would have denied is reported in the Result and to the observer.
	Shadow bool
	// FailureMode overrides the engine's failure mode for this budget.
	FailureMode FailureMode
	// Leasing lets a shared store lease slices of a hot key's budget to an
	// instance, which spends them locally (see [Leasing]). Off by default.
	Leasing Leasing
	// Scale, when set, lowers the budget's quota for every key by the
	// factor it reports (see [Scaler]), on top of what QuotaFunc resolved:
	// quotas that follow load or a schedule (package core/scale). It is
	// read at every request, so a new scale takes effect at the next
	// request; what a key already spent stays spent.
	Scale Scaler
}

// A Scaler gives a budget's scale: the factor, in (0, 1], that its quota
// is multiplied by now. The scaled quota is floor(quota × factor), at
// least 1; a TokenBucket's burst is scaled with it (its rate and its
// capacity fall together), a LeakyBucket's rate is (its burst, the
// requests it queues, is kept), and a Concurrency budget's slots are. A
// factor of 1 or more, or one that is not a number, leaves the budget
// as it is: a scale lowers a quota and never raises it.
//
// Scale is called on every request that evaluates the budget, so it must
// be quick and safe for concurrent use; package core/scale's Controller
// reads one atomic value.
type Scaler interface {
	Scale() float64
}

// scaleLimit returns l with its quota multiplied by factor f (see
// [Scaler]).
func scaleLimit(l Limit, f float64) Limit {
	if !(f < 1) {
		return l
	}
	scale := func(n int64) int64 {
		if !(f > 0) {
			return 1
		}
		return max(1, int64(float64(n)*f))
	}
	l.Quota = scale(l.Quota)
	if l.Algorithm == TokenBucket {
		l.Burst = scale(l.Burst)
	}
	return l
}

// limitFor returns the Limit of budget b when its quota resolves to q.
func (b *Budget) limitFor(q int64) Limit {
	l := Limit{Algorithm: b.Algorithm, Quota: q, Window: b.Window, Leasing: b.leaseFor()}
	switch b.Algorithm {
	case TokenBucket:
		l.Burst = b.Burst
		if l.Burst == 0 {
			l.Burst = q
		}
	case LeakyBucket:
		l.Burst = b.Burst
		if l.Burst == 0 {
			l.Burst = 1
		}
		l.MaxWait = b.MaxWait
	}
	return l
}
