package core

import (
	"fmt"
	"time"
)

// Leasing lets a store shared by several instances hand an instance a slice
// of a hot key's budget, which the instance then spends locally, with no
// store call per decision. The zero value turns leasing off.
//
// A lease is charged in the store when it is taken, so admitted requests
// never exceed the quota, in any window and for any number of instances.
// What a lease costs is under-admission: units an instance holds are not
// available to the others until it spends them or gives them back. Stores
// size leases to keep that small (see package core/redisstore, Leases):
// they lease only keys that are hot on this instance, shrink leases as the
// budget's remaining falls and go back to one call per decision near its
// end.
//
// Leasing applies to FixedWindow, SlidingWindow and TokenBucket budgets
// (for a token bucket a lease is at most the burst). A SlidingLog must
// record the time of every unit, a LeakyBucket must give each request its
// own delay, and a Concurrency budget's slots are given back one by one,
// so none of them can be leased: [New] refuses a Leasing on them. (A
// Concurrency budget's Window, which policy files call its lease, is
// another thing: how long a slot is held at most.)
// Shadow items are never served from a lease. The memory store is already
// local to its instance and ignores Leasing.
type Leasing struct {
	// Max is the most units one lease may hold. 0 turns leasing off. A
	// lease is usually smaller: it follows the key's local rate and the
	// budget's remaining.
	Max int64
	// TTL is how long a lease lives at most; it also ends at the end of
	// the budget's window. Units an instance has not spent when its lease
	// ends are given back. Between MinLeaseTTL and MaxLeaseTTL; default
	// DefaultLeaseTTL.
	TTL time.Duration
}

// The bounds and default of [Leasing.TTL].
const (
	MinLeaseTTL     = 10 * time.Millisecond
	MaxLeaseTTL     = 10 * time.Second
	DefaultLeaseTTL = 250 * time.Millisecond
)

// Enabled reports whether l turns leasing on.
func (l Leasing) Enabled() bool { return l.Max > 0 }

// leaseFor returns b's Leasing as its Limit carries it: with the default
// TTL filled in, and the zero Leasing when leasing is off.
func (b *Budget) leaseFor() Leasing {
	if !b.Leasing.Enabled() {
		return Leasing{}
	}
	l := b.Leasing
	if l.TTL == 0 {
		l.TTL = DefaultLeaseTTL
	}
	return l
}

// checkLease reports the problems of b's Leasing, each as a message without
// the budget's name.
func (b *Budget) checkLease() []leaseProblem {
	l := b.Leasing
	if l == (Leasing{}) {
		return nil
	}
	var probs []leaseProblem
	switch {
	case l.Max < 0:
		probs = append(probs, leaseProblem{"leasing.max", fmt.Sprintf("lease max %d is negative", l.Max)})
	case l.Max == 0:
		probs = append(probs, leaseProblem{"leasing", "lease TTL is set but lease max is 0 (leasing is off)"})
	case l.Max > MaxQuota:
		probs = append(probs, leaseProblem{"leasing.max", fmt.Sprintf("lease max %d exceeds %d", l.Max, int64(MaxQuota))})
	}
	if l.TTL != 0 && (l.TTL < MinLeaseTTL || l.TTL > MaxLeaseTTL) {
		probs = append(probs, leaseProblem{"leasing.ttl", fmt.Sprintf("lease TTL %v is outside [%v, %v]", l.TTL, MinLeaseTTL, MaxLeaseTTL)})
	}
	switch b.Algorithm {
	case FixedWindow, SlidingWindow, TokenBucket:
	default:
		probs = append(probs, leaseProblem{"leasing", fmt.Sprintf("%s cannot be leased (only fixed_window, sliding_window and token_bucket)", b.Algorithm)})
	}
	return probs
}

// leaseProblem is a problem of a budget's Leasing and the setting it is
// about (see BudgetProblem.Field).
type leaseProblem struct{ field, msg string }

// LeaseEvent is what happened to a lease, for a [LeaseObserver].
type LeaseEvent int

const (
	// LeaseTaken: the store charged a lease of units for this instance.
	LeaseTaken LeaseEvent = iota
	// LeaseReturned: a lease ended early (its window ended, the store
	// closed, or the lease was replaced) and its unspent units were given
	// back; units is how many.
	LeaseReturned
	// LeaseExpired: a lease reached its TTL; units is how many of its
	// units were unspent and given back.
	LeaseExpired
	// LeaseStranded: units that a lease charged but that no request spent
	// and that could not be given back (the window had passed, or giving
	// back failed).
	LeaseStranded
	// LeaseServedLocal: units is how many decisions were served from this
	// instance's leases, with no store call, since the last report.
	LeaseServedLocal
	// LeaseServedStore: units is how many decisions of leased budgets went
	// to the store since the last report.
	LeaseServedStore
)

var leaseEventNames = [...]string{"taken", "returned", "expired", "stranded", "served_local", "served_store"}

// String returns the event's metric label, e.g. "taken".
func (e LeaseEvent) String() string {
	return enumString(e, leaseEventNames[:], "LeaseEvent")
}

// LeaseObserver is an optional interface of an [Observer]: a store that
// leases (core/redisstore, with its Config.Observer set to an observer
// that implements it) reports what its leases do. ObserveLease is called
// on a request's goroutine or one of the store's, sometimes while the
// store holds the lock of the key concerned: keep it quick, and do not
// call the store from it. Served counts are reported in batches, at most
// about twenty times a second per key that leases.
type LeaseObserver interface {
	ObserveLease(budget string, event LeaseEvent, units int64)
}
