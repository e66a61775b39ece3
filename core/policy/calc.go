package policy

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Limits is what a quota per window means in practice: the numbers to
// configure and to publish for clients.
type Limits struct {
	// Quota and Window are the limit: Quota requests per Window.
	Quota  int64
	Window time.Duration
	// Spacing is the minimum interval between requests of a client that
	// paces itself evenly: Window/Quota, rounded up to the microsecond (the
	// token bucket's emission interval). A client that never sends faster
	// stays within the limit under every algorithm.
	Spacing time.Duration
	// PerSecond is the sustained rate, Quota/Window, in requests per
	// second.
	PerSecond float64
	// Burst is a suggested token-bucket capacity: ten times the
	// per-second rate, rounded up, between 1 and Quota (enough for a page
	// load, not for sustained abuse). BurstHigh is the same at twenty
	// times, the top of the usual range.
	Burst, BurstHigh int64
	// RetryAfter is the Retry-After to publish when a smoothly refilled
	// budget (token or leaky bucket) is exhausted: the wait for the next
	// unit, Spacing rounded up to whole seconds, at least 1s.
	RetryAfter time.Duration
	// RetryAfterWindow is the longest Retry-After a fixed window publishes:
	// exhausted at the start of a window, a client waits the whole window
	// (rounded up to whole seconds).
	RetryAfterWindow time.Duration
	// FixedWindowPeak is the most a fixed window admits in a short span
	// across a window boundary: twice the quota.
	FixedWindowPeak int64
}

// Calculate returns the limits of quota requests per window. The quota
// must be positive and at most core.MaxQuota, the window a positive whole
// number of microseconds with at least one microsecond per request.
func Calculate(quota int64, window time.Duration) (Limits, error) {
	switch {
	case quota <= 0 || quota > core.MaxQuota:
		return Limits{}, fmt.Errorf("quota %d is out of range (1..%d)", quota, int64(core.MaxQuota))
	case window <= 0 || window%time.Microsecond != 0:
		return Limits{}, fmt.Errorf("window %v is not a positive whole number of microseconds", window)
	case quota > window.Microseconds():
		return Limits{}, fmt.Errorf("quota %d per %v is more than one request per microsecond", quota, window)
	}
	w := window.Microseconds()
	l := Limits{Quota: quota, Window: window}
	l.Spacing = time.Duration(ceilDiv(w, quota)) * time.Microsecond
	l.PerSecond = float64(quota) / window.Seconds()
	l.Burst = suggestedBurst(quota, w, 10)
	l.BurstHigh = suggestedBurst(quota, w, 20)
	l.RetryAfter = max(ceilSeconds(l.Spacing), time.Second)
	l.RetryAfterWindow = max(ceilSeconds(window), time.Second)
	l.FixedWindowPeak = 2 * quota
	return l, nil
}

// suggestedBurst is ceil(times × quota × 1e6 / w) clamped to [1, quota],
// computed exactly.
func suggestedBurst(quota, w, times int64) int64 {
	hi, lo := bits.Mul64(uint64(quota), uint64(times*1_000_000))
	if hi >= uint64(w) {
		return quota
	}
	q, r := bits.Div64(hi, lo, uint64(w))
	if r != 0 {
		q++
	}
	return max(1, min(int64(q), quota))
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func ceilSeconds(d time.Duration) time.Duration {
	return time.Duration(ceilDiv(int64(d), int64(time.Second))) * time.Second
}
