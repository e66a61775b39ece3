package core

import (
	"fmt"
	"time"
)

// This file is what a budget resolves to for one key ([Limit]), what a
// store needs to evaluate it, and the one definition of a valid limit
// ([Limit.Validate]), which stores apply to every item ([Item.Validate]).

// MaxQuota is the largest quota, burst or cost a budget accepts: the
// largest Integer an RFC 9651 structured field can carry.
const MaxQuota = 999_999_999_999_999

// MaxSlidingLogQuota is the largest quota of a SlidingLog budget; the log
// keeps up to quota entries per key.
const MaxSlidingLogQuota = 100_000

// MaxConcurrencyQuota is the largest quota of a Concurrency budget: the
// Redis store keeps one entry per slot held.
const MaxConcurrencyQuota = 100_000

// ConcurrencyRetryAfter is the RetryAfter of a denied [Concurrency] budget.
// No store knows when a slot will free (when a request in flight
// finishes); one second is the smallest Retry-After that HTTP can say,
// and most requests guarded by a concurrency budget finish within it.
const ConcurrencyRetryAfter = time.Second

// maxExact is 2^53: the Redis store computes in Lua doubles, which are exact
// integers up to this bound, so every product the algorithms form must stay
// below it.
const maxExact = 1 << 53

// maxSpan bounds a bucket's burst×interval, a max wait and a window (µs):
// 2^50 µs, about 35 years. GCRA forms times up to now + 2×burst×interval +
// max wait, which stays below maxExact while now < 2^52 µs (the year 2112).
// The Redis store's take script checks the window against the same bound
// (MAXW in take.lua).
const maxSpan = 1 << 50

// Limit is a budget's algorithm and parameters, resolved for one key: what a
// [Store] needs to evaluate it.
type Limit struct {
	Algorithm Algorithm
	Quota     int64
	Window    time.Duration
	// Burst is the effective bucket capacity for TokenBucket and
	// LeakyBucket (never 0 here); 0 for the other algorithms.
	Burst int64
	// MaxWait is the LeakyBucket shaping bound; 0 for the others.
	MaxWait time.Duration
	// Leasing is the budget's [Leasing], with its default TTL filled in; the
	// zero Leasing when leasing is off.
	Leasing Leasing
}

// Capacity is the largest cost a single request can ever have under l: the
// burst for bucket algorithms, the quota otherwise.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket {
		return l.Burst
	}
	return l.Quota
}

// Interval is the GCRA emission interval ceil(Window/Quota) in microseconds
// for bucket algorithms, or 0.
func (l Limit) Interval() int64 {
	if l.Algorithm != TokenBucket && l.Algorithm != LeakyBucket {
		return 0
	}
	return ceilDiv(l.Window.Microseconds(), l.Quota)
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Validate reports why a store cannot evaluate l exactly, or nil. It is
// the one definition of a valid limit: [New] checks every budget's limit
// with it, the engine checks a resolved quota's limit with it before
// using it, and both stores check every item of a Take or Refund with it
// (through [Item.Validate]). The rules:
//
//   - Algorithm is one of the five algorithms;
//   - 1 <= Quota <= MaxQuota;
//   - Window is a positive whole number of milliseconds, at most 2^50 µs
//     (about 35 years);
//   - SlidingWindow: 2×Quota×(Window in ms) stays below 2^53;
//   - SlidingLog: Quota <= MaxSlidingLogQuota;
//   - TokenBucket and LeakyBucket: at most one unit per microsecond
//     (Quota <= Window in µs), 1 <= Burst <= MaxQuota, Burst×Interval and
//     MaxWait (not negative) at most 2^50 µs.
//
// Burst and MaxWait are not read for the other algorithms. These bounds
// keep every value the algorithms form an exact integer in the Redis
// store's Lua doubles. When several rules are broken, the error is the
// first one's.
func (l Limit) Validate() error {
	if p := l.problems(); len(p) > 0 {
		return p[0]
	}
	return nil
}

// problems lists every rule of [Limit.Validate] that l breaks.
func (l *Limit) problems() []error {
	var errs []error
	if l.Algorithm < FixedWindow || l.Algorithm > Concurrency {
		errs = appendf(errs, "unknown algorithm %d", int(l.Algorithm))
	}
	if l.Quota <= 0 {
		errs = appendf(errs, "quota %d is not positive", l.Quota)
	} else if l.Quota > MaxQuota {
		errs = appendf(errs, "quota %d exceeds %d", l.Quota, int64(MaxQuota))
	}
	switch {
	case l.Window <= 0:
		errs = appendf(errs, "window %v is not positive", l.Window)
	case l.Window%time.Millisecond != 0:
		errs = appendf(errs, "window %v is not a whole number of milliseconds", l.Window)
	case l.Window.Microseconds() > maxSpan:
		errs = appendf(errs, "window %v exceeds 2^50 µs", l.Window)
	}
	if len(errs) > 0 {
		return errs // the rules below divide by the quota and the window
	}
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case SlidingWindow:
		if 2*l.Quota > maxExact/(l.Window.Milliseconds()) {
			errs = appendf(errs, "quota %d over %v is too large for the sliding window counter (2×quota×window in ms must stay below 2^53)", l.Quota, l.Window)
		}
	case SlidingLog:
		if l.Quota > MaxSlidingLogQuota {
			errs = appendf(errs, "quota %d exceeds %d, the largest a sliding log keeps; use sliding_window", l.Quota, MaxSlidingLogQuota)
		}
	case Concurrency:
		if l.Quota > MaxConcurrencyQuota {
			errs = appendf(errs, "quota %d exceeds %d, the most slots a concurrency budget holds", l.Quota, MaxConcurrencyQuota)
		}
	case TokenBucket, LeakyBucket:
		if l.Quota > w {
			errs = appendf(errs, "quota %d per %v is more than one unit per microsecond", l.Quota, l.Window)
		}
		// GCRA forms now + 2·burst·T + max wait; keeping burst·T and the
		// wait below 2^50 µs (35 years) keeps that exact in Lua doubles.
		if l.Burst <= 0 || l.Burst > MaxQuota {
			errs = appendf(errs, "burst %d is out of range", l.Burst)
		} else if t := l.Interval(); l.Burst > maxSpan/t {
			errs = appendf(errs, "burst %d with an emission interval of %dµs exceeds 2^50 µs", l.Burst, t)
		}
		if l.MaxWait < 0 {
			errs = appendf(errs, "max wait %v is negative", l.MaxWait)
		} else if l.MaxWait.Microseconds() > maxSpan {
			errs = appendf(errs, "max wait %v exceeds 2^50 µs", l.MaxWait)
		}
	}
	return errs
}

// appendf appends a formatted error to errs.
func appendf(errs []error, format string, args ...any) []error {
	return append(errs, fmt.Errorf(format, args...))
}

// Validate reports why a store cannot evaluate it, or nil: its limit
// breaks a rule of [Limit.Validate], or its cost is negative or above
// what the limit can ever hold (Limit.Capacity). The error names the
// budget. Stores call it on every item they are given.
func (it *Item) Validate() error {
	if it.plainlyValid() {
		return nil
	}
	l := &it.Limit
	if p := l.problems(); len(p) > 0 {
		return fmt.Errorf("budget %q: %w", it.Budget, p[0])
	}
	if it.Cost < 0 || it.Cost > l.Capacity() {
		return fmt.Errorf("budget %q: cost %d is outside 0 to %d, what the budget can hold", it.Budget, it.Cost, it.Limit.Capacity())
	}
	return nil
}

// plainlyValid is Validate's fast path, which every take goes through: it
// reports true only for a fixed window or concurrency item that breaks no
// rule, and false for every other item, which Validate then checks rule by
// rule (FuzzItemValidate holds it to that).
func (it *Item) plainlyValid() bool {
	l := &it.Limit
	q := MaxQuota
	switch l.Algorithm {
	case FixedWindow:
	case Concurrency:
		q = MaxConcurrencyQuota
	default:
		return false
	}
	return 0 < l.Quota && l.Quota <= int64(q) &&
		0 < l.Window && l.Window <= maxSpan*time.Microsecond && l.Window%time.Millisecond == 0 &&
		0 <= it.Cost && it.Cost <= l.Quota
}
