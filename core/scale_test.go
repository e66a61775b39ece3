package core_test

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// fixedScale is a Scaler set by hand.
type fixedScale struct{ bits atomic.Uint64 }

func newFixedScale(f float64) *fixedScale {
	s := &fixedScale{}
	s.set(f)
	return s
}

func (s *fixedScale) set(f float64)  { s.bits.Store(math.Float64bits(f)) }
func (s *fixedScale) Scale() float64 { return math.Float64frombits(s.bits.Load()) }

// TestScaledQuota: a budget's Scale lowers its quota at the next request,
// the fields announce the scaled quota and remaining, what a key spent
// stays spent when the scale falls and rises, and a factor of 1 or more
// (or not a number) leaves the quota as it is.
func TestScaledQuota(t *testing.T) {
	clk := newFakeClock(t0)
	sc := newFixedScale(1)
	e, _ := newEngine(t, clk, core.Budget{Name: "api", Quota: 10, Window: time.Minute, Key: remoteAddrKey, Scale: sc})
	l := e.MustLayer(core.Use("api"))
	spend := func(n int) (allowed int, last *core.Decision) {
		for range n {
			last = decide(l, request("GET", "k"))
			if last.Allowed {
				allowed++
			}
		}
		return allowed, last
	}
	if n, _ := spend(4); n != 4 {
		t.Fatalf("at scale 1: %d of 4 allowed", n)
	}
	sc.set(0.5) // quota 5, of which 4 spent
	d := decide(l, request("GET", "k"))
	f := l.Fields(d)
	if !d.Allowed || f.Get(core.HeaderPolicy) != `"api";q=5;w=60` || f.Get(core.HeaderRateLimit) != `"api";r=0;t=60` {
		t.Errorf("at scale 0.5, 5th request: allowed %v, fields %q / %q; want allowed, q=5 and r=0", d.Allowed, f.Get(core.HeaderPolicy), f.Get(core.HeaderRateLimit))
	}
	if n, d := spend(3); n != 0 || d.RetryAfter != time.Minute {
		t.Errorf("at scale 0.5 after 5 spent: %d allowed, retry after %v; want 0 and 1m", n, d.RetryAfter)
	}
	sc.set(0.05) // floor(0.5) = 0: at least 1
	if d := decide(l, request("GET", "fresh")); !d.Allowed || l.Fields(d).Get(core.HeaderPolicy) != `"api";q=1;w=60` {
		t.Errorf("at scale 0.05: a fresh key's first request allowed %v, policy %q; want allowed at q=1", d.Allowed, l.Fields(d).Get(core.HeaderPolicy))
	}
	for _, f := range []float64{1, 1.5, math.NaN(), math.Inf(1)} {
		sc.set(f)
		if d := decide(l, request("GET", "other")); l.Fields(d).Get(core.HeaderPolicy) != `"api";q=10;w=60` {
			t.Errorf("at scale %v: policy %q, want the full quota", f, l.Fields(d).Get(core.HeaderPolicy))
		}
	}
	sc.set(1) // back to 10: the 5 spent stay spent
	if n, _ := spend(10); n != 5 {
		t.Errorf("back at scale 1 after 5 spent: %d allowed, want 5", n)
	}
}

// TestScaledBucket: a token bucket's rate and burst fall together, and
// Retry-After follows the scaled rate.
func TestScaledBucket(t *testing.T) {
	clk := newFakeClock(t0)
	sc := newFixedScale(0.25)
	e, _ := newEngine(t, clk, core.Budget{Name: "b", Algorithm: core.TokenBucket, Quota: 60, Window: time.Minute, Key: remoteAddrKey, Scale: sc})
	l := e.MustLayer(core.Use("b"))
	allowed := 0
	var last *core.Decision
	for range 20 {
		if last = decide(l, request("GET", "k")); last.Allowed {
			allowed++
		}
	}
	if allowed != 15 {
		t.Errorf("at scale 0.25 of a 60/min bucket with burst 60: %d of 20 allowed, want 15", allowed)
	}
	if last.RetryAfter != 4*time.Second {
		t.Errorf("retry after %v, want 4s (15 a minute)", last.RetryAfter)
	}
}

// TestScaledPeek: Peek reports the scaled limit, as a decision would use.
func TestScaledPeek(t *testing.T) {
	clk := newFakeClock(t0)
	sc := newFixedScale(0.5)
	e, _ := newEngine(t, clk, core.Budget{Name: "api", Quota: 10, Window: time.Minute, Key: remoteAddrKey, Scale: sc})
	res, err := e.Peek(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Limit.Quota != 5 || res[0].Remaining != 5 {
		t.Errorf("peek at scale 0.5: quota %d remaining %d, want 5 and 5", res[0].Limit.Quota, res[0].Remaining)
	}
}

// TestCostAboveScaledCapacityCanRetry: a request that costs more than a
// scaled budget holds now, but no more than it holds at full scale, is
// denied as rate limited with a Retry-After (it passes once the scale
// rises), not as a cost no wait can help; a request above the full
// capacity is still told that no wait helps.
func TestCostAboveScaledCapacityCanRetry(t *testing.T) {
	clk := newFakeClock(t0)
	sc := newFixedScale(0.2) // capacity 2 of 10
	e, _ := newEngine(t, clk, core.Budget{Name: "api", Quota: 10, Window: time.Minute, Key: remoteAddrKey, Scale: sc})
	costly := e.MustLayer(core.Use("api"), core.Cost(5))
	d := decide(costly, request("GET", "k"))
	den := costly.Deny(request("GET", "k"), d)
	if d.Allowed || d.Reason != core.ReasonRateLimited || den.Status != 429 || den.Header.Get(core.HeaderRetryAfter) == "" {
		t.Errorf("cost 5 at scale 0.2 (capacity 2): allowed %v, reason %v, %d, Retry-After %q; want rate limited, 429 with Retry-After",
			d.Allowed, d.Reason, den.Status, den.Header.Get(core.HeaderRetryAfter))
	}
	sc.set(1)
	if d := decide(costly, request("GET", "k")); !d.Allowed {
		t.Errorf("cost 5 at scale 1: denied (%v)", d.Reason)
	}
	tooMuch := e.MustLayer(core.Use("api"), core.CostFrom(func(*core.Request) (int64, error) { return 11, nil }))
	if d := decide(tooMuch, request("GET", "k")); d.Reason != core.ReasonCostTooHigh {
		t.Errorf("cost 11 of a quota of 10: reason %v, want ReasonCostTooHigh", d.Reason)
	}
}
