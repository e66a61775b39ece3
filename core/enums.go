package core

import (
	"fmt"
	"slices"
	"strings"
)

// This file is a budget's enumerated settings ([Algorithm], [MissingKey],
// [FailureMode]) and their configuration names.

// Algorithm selects how a budget counts. The zero value is FixedWindow.
type Algorithm int

const (
	// FixedWindow counts requests in windows aligned to multiples of the
	// window since the Unix epoch (a one-minute window resets at :00). It
	// admits up to quota in each window, so up to 2×quota across a boundary.
	FixedWindow Algorithm = iota
	// SlidingWindow is the sliding window counter: the previous window's
	// count, weighted by the fraction of it the sliding window still covers,
	// plus the current window's count. Computed in whole milliseconds. It
	// is an estimate: a client that spends the quota just before a window
	// boundary regains it gradually over the next window, not at once, but
	// in the worst case fewer than 2×quota pass in one window-long span
	// (exactly 2×quota - ceil(quota/window in ms); storetest.WorstCase).
	// Use SlidingLog for at most quota in any window-long span.
	SlidingWindow
	// SlidingLog keeps one timestamp per admitted request and admits exactly
	// quota in any window-long interval. Its memory grows with the quota,
	// which is capped at MaxSlidingLogQuota.
	SlidingLog
	// TokenBucket is GCRA: a bucket of Burst tokens (Quota when Burst is 0)
	// refilled at Quota per Window, one token every T = ceil(Window/Quota)
	// µs. In any span of length L it admits at most Burst +
	// floor((L-1µs)/T) (storetest.WorstCase).
	TokenBucket
	// LeakyBucket is GCRA used for shaping: a request that would be denied
	// is admitted with a Delay when its slot comes within MaxWait; the
	// adapter waits that long before calling the handler. Burst defaults to
	// 1, so admitted requests are spaced by Window/Quota.
	LeakyBucket
	// Concurrency counts requests in flight instead of arrivals: a request
	// takes Cost slots of the key's Quota when it is admitted and gives them
	// back when it leaves the layer. Window is a slot's lease, not a
	// period. Quota is at most MaxConcurrencyQuota. When slots are given
	// back, what a lease means in each store, and what a denial says: the
	// package documentation, Concurrency.
	Concurrency
)

var algorithmNames = [...]string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "concurrency"}

// String returns the algorithm's configuration name, e.g. "fixed_window".
func (a Algorithm) String() string { return enumString(a, algorithmNames[:], "Algorithm") }

// ParseAlgorithm returns the algorithm named s ("fixed_window",
// "sliding_window", "sliding_log", "token_bucket", "leaky_bucket" or
// "concurrency"; "gcra" is accepted for token_bucket, "in_flight" for
// concurrency).
func ParseAlgorithm(s string) (Algorithm, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fixed_window", "fixed":
		return FixedWindow, nil
	case "sliding_window", "sliding_window_counter", "sliding":
		return SlidingWindow, nil
	case "sliding_log", "sliding_window_log":
		return SlidingLog, nil
	case "token_bucket", "gcra":
		return TokenBucket, nil
	case "leaky_bucket", "shaping":
		return LeakyBucket, nil
	case "concurrency", "in_flight":
		return Concurrency, nil
	}
	return 0, fmt.Errorf("unknown algorithm %q (want fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or concurrency)", s)
}

// MissingKey says what a budget does with a request its key function cannot
// key (it returned an error).
type MissingKey int

const (
	// MissingKeyDeny refuses the request with ReasonNoKey (401 or 400 by default)
	// before anything is charged. It is the default: a request nobody can
	// be held accountable for is never silently unlimited.
	MissingKeyDeny MissingKey = iota
	// MissingKeySkip leaves the budget out of this request's decision
	// when the request carries no key. A request whose key is garbled
	// (an error wrapping [ErrBadKey]: malformed, over-long, repeated) is
	// denied instead, as with MissingKeyDeny. Use it only when another
	// budget limits keyless requests.
	MissingKeySkip
	// MissingKeyFallback keys the request with the budget's FallbackKey
	// (for example the client IP when there is no tenant); if that fails
	// too, the request is denied as with MissingKeyDeny. Fallback keys are
	// counted apart from primary keys (they carry a prefix of their own),
	// so an IP never shares a budget with a tenant of the same spelling.
	MissingKeyFallback
)

var missingKeyNames = [...]string{"deny", "skip", "fallback"}

// String returns the action's configuration name: "deny", "skip" or
// "fallback".
func (m MissingKey) String() string { return enumString(m, missingKeyNames[:], "MissingKey") }

// ParseMissingKey returns the missing-key action named s: "deny", "skip" or
// "fallback", as [MissingKey.String] writes them.
func ParseMissingKey(s string) (MissingKey, error) {
	return parseEnum[MissingKey](s, missingKeyNames[:], "missing-key action")
}

// enumString returns the name of v, or Type(v) for a value without one.
func enumString[T ~int](v T, names []string, typ string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, int(v))
}

// parseEnum returns the value named s, or an error listing the names.
func parseEnum[T ~int](s string, names []string, what string) (T, error) {
	if i := slices.Index(names, s); i >= 0 {
		return T(i), nil
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return 0, fmt.Errorf("unknown %s %q (want %s)", what, s, want)
}

// FailureMode says what happens to a budget when the store cannot evaluate
// it (an error, a timeout, an open circuit breaker).
type FailureMode int

const (
	// FailInherit uses the engine's FailureMode (FailOpen unless set).
	FailInherit FailureMode = iota
	// FailOpen lets the request through and reports the error.
	FailOpen
	// FailClosed denies the request with ReasonUnavailable (503 with
	// Retry-After by default). Use it for login, OTP and password reset,
	// where an outage must not unlock brute force.
	FailClosed
	// FailLocal evaluates the budget on the engine's Fallback store (an
	// in-memory store per instance) while the main store is unavailable,
	// so that N instances admit up to N × the quota meanwhile.
	FailLocal
)

var failureModeNames = [...]string{"inherit", "open", "closed", "local"}

// String returns the mode's configuration name: "inherit", "open",
// "closed" or "local".
func (m FailureMode) String() string { return enumString(m, failureModeNames[:], "FailureMode") }

// ParseFailureMode returns the failure mode named s: "inherit", "open",
// "closed" or "local", as [FailureMode.String] writes them.
func ParseFailureMode(s string) (FailureMode, error) {
	return parseEnum[FailureMode](s, failureModeNames[:], "failure mode")
}
