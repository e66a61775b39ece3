package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// OpenAt returns a store that reads the time from clock (a memory store
// with Config.Clock, a Redis store whose scripts are given the time), for
// the checks that move time: [Bounds], [Time] and their Verify forms.
type OpenAt func(clock core.Clock) (core.Store, error)

// Bounds checks, on a store from open, that no algorithm admits more than
// its documented worst case ([WorstCase]) under adversarial arrivals:
// bursts just before and at window boundaries, bursts at every phase of
// the window, dense and random streams, refills after idle spells, quota
// changes (a scaled budget) and mixed costs. It moves the store's clock
// itself. It also fails when no pattern reaches a window algorithm's
// worst case, so that the table it checks is exact, not merely safe.
func Bounds(t *testing.T, open OpenAt) {
	t.Helper()
	if err := VerifyBounds(context.Background(), open); err != nil {
		t.Error(err)
	}
}

// VerifyBounds is [Bounds] for code without a *testing.T: it returns
// every bound a store broke, joined, or nil.
func VerifyBounds(ctx context.Context, open OpenAt) error {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	s, err := open(clock)
	if err != nil {
		return fmt.Errorf("storetest: new store: %w", err)
	}
	var errs []error
	for _, l := range boundLimits {
		if err := checkBounds(ctx, s, clock, l); err != nil {
			errs = append(errs, fmt.Errorf("%s q=%d w=%v burst=%d: %w", l.Algorithm, l.Quota, l.Window, l.Burst, err))
		}
	}
	return errors.Join(errs...)
}

// WorstCase returns the most units l admits for one key in any span of
// time of length span (admissions at times t with s <= t < s+span), from
// any state. This is the one statement of every algorithm's bound
// (package core's Algorithm constants summarise it). A LeakyBucket's
// bound is on the times its requests start (the decision's time plus its
// Delay). Concurrency has no time bound (Quota slots at any instant): it
// returns 0.
//
//   - FixedWindow: (ceil(span/W) + 1) × Q, so 2Q in any span of one
//     window; Q in any window aligned to the epoch.
//   - SlidingWindow: for span <= W, 2Q - ceil(Q/Wms), where Wms is the
//     window in milliseconds (Q = 100, W = 1 min: 199; fewer than 2Q: a
//     full window's quota spent just before a boundary, then the quota
//     the counter's estimate allows until just before the next); Q in any
//     aligned window. Longer spans: (ceil(span/W) + 1) × Q.
//   - SlidingLog: ceil(span/W) × Q, so Q in any span of one window.
//   - TokenBucket, LeakyBucket: Burst + floor((span - 1µs)/T), T =
//     ceil(W/Q) µs, so at most Burst + Q - 1 in any span of one window
//     (2Q - 1 for a TokenBucket with the default burst, Q).
func WorstCase(l core.Limit, span time.Duration) int64 {
	w, q := l.Window.Microseconds(), l.Quota
	sp := span.Microseconds()
	windows := (sp + w - 1) / w
	switch l.Algorithm {
	case core.FixedWindow:
		return (windows + 1) * q
	case core.SlidingWindow:
		if sp <= w {
			wms := w / 1000
			return 2*q - (q+wms-1)/wms
		}
		return (windows + 1) * q
	case core.SlidingLog:
		return windows * q
	case core.TokenBucket, core.LeakyBucket:
		t := (w + q - 1) / q
		return l.Burst + (sp-1)/t
	}
	return 0
}

var boundLimits = []core.Limit{
	{Algorithm: core.FixedWindow, Quota: 10, Window: time.Second},
	{Algorithm: core.FixedWindow, Quota: 7, Window: 7 * time.Millisecond},
	{Algorithm: core.SlidingWindow, Quota: 10, Window: time.Second},
	{Algorithm: core.SlidingWindow, Quota: 50, Window: 10 * time.Millisecond},
	{Algorithm: core.SlidingWindow, Quota: 3, Window: 1003 * time.Millisecond},
	{Algorithm: core.SlidingLog, Quota: 10, Window: time.Second},
	{Algorithm: core.SlidingLog, Quota: 5, Window: 10 * time.Millisecond},
	{Algorithm: core.TokenBucket, Quota: 10, Window: time.Second, Burst: 10},
	{Algorithm: core.TokenBucket, Quota: 10, Window: time.Second, Burst: 3},
	{Algorithm: core.TokenBucket, Quota: 7, Window: 1003 * time.Millisecond, Burst: 7},
	{Algorithm: core.LeakyBucket, Quota: 5, Window: time.Second, Burst: 1, MaxWait: 500 * time.Millisecond},
	{Algorithm: core.LeakyBucket, Quota: 10, Window: time.Second, Burst: 3, MaxWait: 300 * time.Millisecond},
}

// An arrival is one attempt: when (µs from the pattern's start, a window
// boundary), its cost, and the limit's scale (1, or 0.5 for a scaled
// budget's lower quota).
type arrival struct {
	at   int64
	cost int64
	half bool
}

// An admission is what the store let through: when it counts (a leaky
// bucket's start) and how many units.
type admission struct{ at, units int64 }

// patterns returns the adversarial arrival patterns for l, each sorted by
// time, from a window boundary at 0.
func patterns(l core.Limit) map[string][]arrival {
	w, q := l.Window.Microseconds(), l.Quota
	ps := map[string][]arrival{}
	burst := func(a []arrival, at, n int64) []arrival {
		for range n {
			a = append(a, arrival{at: at, cost: 1})
		}
		return a
	}
	stream := func(a []arrival, from, step, n int64) []arrival {
		for i := range n {
			a = append(a, arrival{at: from + i*step, cost: 1})
		}
		return a
	}
	// A full burst just before a boundary, then a dense stream through
	// the next window.
	for _, d := range []int64{1, 1000, w / 10} {
		var a []arrival
		a = burst(a, w-d, 3*q)
		a = stream(a, w, max(1, w/(8*q)), 10*q)
		ps[fmt.Sprintf("boundary-%dus", d)] = a
	}
	// Bursts at the same phase of four windows in a row.
	for _, p := range []int64{0, 1, 1000, w / 3, w / 2, w - 1000, w - 1} {
		var a []arrival
		for i := range int64(4) {
			a = burst(a, i*w+p, 2*q)
		}
		ps[fmt.Sprintf("phase-%dus", p)] = a
	}
	// A dense stream from an offset, four windows long.
	rng := rand.New(rand.NewPCG(uint64(q), uint64(w)))
	ps["stream"] = stream(nil, rng.Int64N(w), max(1, w/(5*q)), 20*q)
	// Random arrivals, clustered.
	var a []arrival
	for range 6 * q {
		at := rng.Int64N(3 * w)
		if rng.IntN(3) == 0 {
			at = at / w * w // at a boundary
		}
		a = append(a, arrival{at: at, cost: 1})
	}
	ps["random"] = a
	// A burst, an idle spell of two and a half windows, a burst, a stream.
	a = burst(nil, w/2, 2*q)
	a = burst(a, 3*w, 2*q)
	ps["refill"] = stream(a, 3*w+1, max(1, w/(4*q)), 8*q)
	// A scaled budget: the quota halves and comes back every half window.
	a = nil
	for i := range 16 * q {
		at := i * max(1, w/(4*q))
		a = append(a, arrival{at: at, cost: 1, half: (at/(w/2))%2 == 1})
	}
	ps["scaled"] = a
	// Mixed costs in a dense stream.
	a = nil
	for i := range 8 * q {
		a = append(a, arrival{at: w - 2000 + i*max(1, w/(6*q)), cost: 1 + i%3})
	}
	ps["costs"] = a
	for _, a := range ps {
		slices.SortStableFunc(a, func(x, y arrival) int { return cmp.Compare(x.at, y.at) })
	}
	return ps
}

func checkBounds(ctx context.Context, s core.Store, clock *fakeclock.Clock, l core.Limit) error {
	w := l.Window.Microseconds()
	// Every pattern starts at a window boundary well after the last one.
	base := clock.Now().UnixMicro()
	var errs []error
	reached := false
	ps := patterns(l)
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		start := (base/w + 4) * w
		key := fresh()
		var adm []admission
		for _, a := range ps[name] {
			now := start + a.at
			clock.Set(time.UnixMicro(now))
			lim := l
			if a.half {
				lim.Quota = max(1, l.Quota/2)
				if l.Burst > 0 {
					lim.Burst = max(1, l.Burst/2)
				}
			}
			cost := min(a.cost, lim.Quota)
			if lim.Burst > 0 {
				cost = min(cost, lim.Burst) // what a bucket can hold
			}
			out, err := take(ctx, s, core.Item{Budget: "storetest-bounds", Key: key, Cost: cost, Limit: lim})
			if err != nil {
				return err
			}
			if out[0].Allowed {
				adm = append(adm, admission{at: now - start + out[0].Delay.Microseconds(), units: cost})
			}
		}
		base = start + ps[name][len(ps[name])-1].at + 3*w
		if len(adm) == 0 {
			errs = append(errs, fmt.Errorf("%s: nothing admitted", name))
			continue
		}
		worst, at := maxInSpan(adm, w)
		if bound := WorstCase(l, l.Window); worst > bound {
			errs = append(errs, fmt.Errorf("%s: %d units admitted in the span of one window from %dµs, bound %d", name, worst, at, bound))
		} else if worst == bound && name != "scaled" {
			reached = true
		}
		if l.Algorithm == core.FixedWindow || l.Algorithm == core.SlidingWindow {
			if n, from := maxAligned(adm, w); n > l.Quota {
				errs = append(errs, fmt.Errorf("%s: %d units admitted in the aligned window from %dµs, quota %d", name, n, from, l.Quota))
			}
		}
		if l.Algorithm == core.TokenBucket || l.Algorithm == core.LeakyBucket {
			if err := checkGCRA(adm, l); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	clock.Set(time.UnixMicro(base))
	if !reached && l.Algorithm != core.LeakyBucket {
		errs = append(errs, fmt.Errorf("no pattern reached the worst case %d: the patterns are not adversarial enough, or the bound is not exact", WorstCase(l, l.Window)))
	}
	return errors.Join(errs...)
}

// maxInSpan returns the most units admitted in any span [s, s+w) that
// starts at an admission (where the most such spans start), and where.
func maxInSpan(adm []admission, w int64) (most, at int64) {
	slices.SortStableFunc(adm, func(x, y admission) int { return cmp.Compare(x.at, y.at) })
	j, sum := 0, int64(0)
	for i := range adm {
		for j < len(adm) && adm[j].at < adm[i].at+w {
			sum += adm[j].units
			j++
		}
		if sum > most {
			most, at = sum, adm[i].at
		}
		sum -= adm[i].units
	}
	return most, at
}

// maxAligned returns the most units admitted in one window aligned to the
// pattern's start (a window boundary), and that window's start.
func maxAligned(adm []admission, w int64) (most, from int64) {
	per := map[int64]int64{}
	for _, a := range adm {
		per[a.at/w] += a.units
	}
	for k, n := range per {
		if n > most {
			most, from = n, k*w
		}
	}
	return most, from
}

// checkGCRA checks the token bucket's bound between every two admissions:
// the units from the i-th to the j-th are at most Burst + floor((tj -
// ti)/T).
func checkGCRA(adm []admission, l core.Limit) error {
	t := (l.Window.Microseconds() + l.Quota - 1) / l.Quota
	for i := range adm {
		var sum int64
		for j := i; j < len(adm); j++ {
			sum += adm[j].units
			if bound := l.Burst + (adm[j].at-adm[i].at)/t; sum > bound {
				return fmt.Errorf("%d units from %dµs to %dµs, bound %d", sum, adm[i].at, adm[j].at, bound)
			}
		}
	}
	return nil
}
