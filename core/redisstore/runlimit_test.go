package redisstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// drive feeds l runs of 16 decisions whose mean latency is lat(slots),
// every window with Takes queued behind full slots when full is set, and
// returns the limit after each run.
func drive(l *runLimit, runs int, full bool, lat func(slots int) time.Duration) []int {
	const perRun = 16
	seen := make([]int, 0, runs)
	for range runs {
		if full {
			l.full = true
		}
		l.observe(perRun*lat(l.slots), perRun)
		seen = append(seen, l.slots)
	}
	return seen
}

// mostly returns the limit seen most often in the last quarter of seen.
func mostly(seen []int) int {
	count := map[int]int{}
	best := 0
	for _, s := range seen[len(seen)*3/4:] {
		if count[s]++; count[s] > count[best] {
			best = s
		}
	}
	return best
}

// valley is a latency curve whose minimum is at slots = at.
func valley(at int) func(int) time.Duration {
	return func(slots int) time.Duration {
		d := slots - at
		return time.Millisecond + time.Duration(d*d)*100*time.Microsecond
	}
}

// The limit climbs from one run to the quickest, and stays there between
// probes.
func TestRunLimitFindsTheQuickest(t *testing.T) {
	for _, at := range []int{1, 2, 4, 8, 16} {
		l := newTestLimit(32)
		seen := drive(&l, 20000, true, valley(at))
		if got := mostly(seen); got != at {
			t.Errorf("quickest at %d: the limit is mostly %d (last runs %v)", at, got, seen[len(seen)-20:])
		}
	}
}

// On a network eight callers are answered no quicker with six runs in
// flight than with four, and quickest with eight: the limit steps over
// the plateau.
func TestRunLimitCrossesAPlateau(t *testing.T) {
	l := newTestLimit(32)
	seen := drive(&l, 20000, true, func(slots int) time.Duration {
		switch {
		case slots >= 8:
			return 1300 * time.Microsecond
		case slots >= 4:
			return 1400 * time.Microsecond
		case slots >= 2:
			return 2100 * time.Microsecond
		}
		return 2500 * time.Microsecond
	})
	if got := mostly(seen); got < 8 {
		t.Fatalf("the limit is mostly %d, want 8 or more (last runs %v)", got, seen[len(seen)-20:])
	}
}

// More runs in flight that are not quicker by upGain are not kept: they
// cost the cores more work per decision.
func TestRunLimitKeepsFewRunsWhenMoreDoNotPay(t *testing.T) {
	l := newTestLimit(32)
	seen := drive(&l, 20000, true, func(slots int) time.Duration {
		return time.Millisecond - time.Duration(slots)*time.Microsecond // 0.1% quicker per run
	})
	if got := mostly(seen); got != 1 {
		t.Fatalf("the limit is mostly %d, want 1 (last runs %v)", got, seen[len(seen)-20:])
	}
}

// A limit the traffic does not reach is left where it is.
func TestRunLimitMovesOnlyWhenUsed(t *testing.T) {
	l := newTestLimit(32)
	seen := drive(&l, 20000, false, valley(8))
	for _, s := range seen {
		if s != 1 {
			t.Fatalf("the limit moved to %d with no Take queued", s)
		}
	}
}

// The limit never passes its most.
func TestRunLimitStaysUnderItsMost(t *testing.T) {
	l := newTestLimit(5)
	seen := drive(&l, 20000, true, valley(16))
	for _, s := range seen {
		if s < 1 || s > 5 {
			t.Fatalf("the limit reached %d, outside [1, 5]", s)
		}
	}
	if got := mostly(seen); got != 5 {
		t.Fatalf("the limit is mostly %d, want its most, 5", got)
	}
}

// When the quickest limit moves (the load or the network changed), the
// limit follows it, both ways.
func TestRunLimitFollowsAMovedOptimum(t *testing.T) {
	l := newTestLimit(32)
	if got := mostly(drive(&l, 20000, true, valley(8))); got != 8 {
		t.Fatalf("before: the limit is mostly %d, want 8", got)
	}
	if got := mostly(drive(&l, 20000, true, valley(2))); got != 2 {
		t.Fatalf("after a move down: the limit is mostly %d, want 2", got)
	}
	if got := mostly(drive(&l, 20000, true, valley(16))); got != 16 {
		t.Fatalf("after a move up: the limit is mostly %d, want 16", got)
	}
}

// The runs sent under one limit are not counted in the window of the
// next: after a change, the first slots-before runs are skipped.
func TestRunLimitSkipsRunsSentUnderTheLastLimit(t *testing.T) {
	l := newTestLimit(32)
	l.full = true
	for l.slots == 1 {
		l.observe(16*time.Millisecond, 16)
	}
	if l.skip != 1 {
		t.Fatalf("skip %d after a move from 1 run, want 1", l.skip)
	}
	before := l.decisions
	l.observe(time.Hour, 16) // sent under the last limit
	if l.decisions != before || l.latSum != 0 {
		t.Fatalf("a run sent under the last limit was counted: %d decisions, %v", l.decisions, l.latSum)
	}
}

// The limit is at most half the client's pool, so that runs in flight
// leave connections for the store's other calls, and at most maxRunSlots.
func TestRunLimitMostFollowsThePool(t *testing.T) {
	for _, tc := range []struct{ pool, want int }{{10, 5}, {1, 1}, {1000, maxRunSlots}} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: tc.pool})
		if got := newRunLimit(c).max; got != tc.want {
			t.Errorf("PoolSize %d: most %d runs, want %d", tc.pool, got, tc.want)
		}
		_ = c.Close()
	}
}

func newTestLimit(most int) runLimit {
	return runLimit{slots: 1, max: most, backoff: 1}
}

// noisy multiplies each window's latency by a factor drawn from [1-spread,
// 1+spread] (one draw per window of the limit's windowDecisions / 16
// runs), as a shared machine's scheduling does: on a 2-core machine the
// mean latency of windows at one fixed limit ranged from 110 to 340 µs.
func noisy(seed uint64, spread float64, lat func(int) time.Duration) func(int) time.Duration {
	rng := rand.New(rand.NewPCG(seed, 7))
	var f float64
	runs := 0
	return func(slots int) time.Duration {
		if runs%(windowDecisions/16) == 0 {
			f = 1 - spread + 2*spread*rng.Float64()
		}
		runs++
		return time.Duration(float64(lat(slots)) * f)
	}
}

// Through latency that varies by ±40% from window to window, the limit
// still finds a quickest limit 20% quicker than its neighbours, in most
// seeds: a probe compares several windows of each limit, interleaved.
func TestRunLimitFindsTheQuickestThroughNoise(t *testing.T) {
	curve := func(slots int) time.Duration { // quickest at 4, its neighbours 20% slower
		switch {
		case slots <= 1:
			return 1600 * time.Microsecond
		case slots == 2:
			return 1200 * time.Microsecond
		case slots == 4:
			return 1000 * time.Microsecond
		case slots == 8:
			return 1200 * time.Microsecond
		}
		return 1500 * time.Microsecond
	}
	found := 0
	const seeds = 20
	for seed := range uint64(seeds) {
		l := newTestLimit(16)
		if got := mostly(drive(&l, 40000, true, noisy(seed, 0.4, curve))); got == 4 {
			found++
		}
	}
	if found < seeds*3/4 {
		t.Fatalf("the limit settled at the quickest in %d of %d seeds, want %d or more", found, seeds, seeds*3/4)
	}
}

// pinnedGate returns a gate whose limit stays at n runs.
func pinnedGate(n int) *runGate {
	g := &runGate{lim: runLimit{slots: n, max: n}}
	g.slots.Store(int64(n))
	return g
}

// Three shards whose runs share the cores: a decision's latency falls
// with its own shard's runs in flight (fewer callers wait) and rises with
// every shard's (more work on the cores). Every decision is quickest with
// 2 runs on each shard; the store's one limit, measured over the
// decisions of all three, settles there.
func TestRunGateCountsEveryShard(t *testing.T) {
	const shards = 3
	lat := func(own, total int) time.Duration {
		return time.Duration(2000/float64(own)+100*float64(total)) * time.Microsecond
	}
	g := newRunGate(nil)
	g.lim.max = 32
	for range shards {
		g.join()
	}
	var shared []int
	for range 60000 {
		s := g.limit()
		g.full.Store(true)
		g.observe(16*lat(s, shards*s), 16)
		shared = append(shared, g.limit())
	}
	if got := mostly(shared); got != 2 {
		t.Fatalf("the store's limit is mostly %d, want 2 (last runs %v)", got, shared[len(shared)-20:])
	}
	if g.lim.slots != g.limit() {
		t.Fatalf("the gate's limit %d is not its controller's %d", g.limit(), g.lim.slots)
	}
}
