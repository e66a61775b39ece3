package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// t0 is a realistic start time (2025-06-15) in Unix µs.
const t0 = 1_750_000_000_000_000

// diffBudget is a budget of the differential test: a name and the limits
// it may take (a changed quota keeps the state; a changed algorithm or
// window starts afresh).
type diffBudget struct {
	name   string
	limits []core.Limit
}

func fixed(q int64, w time.Duration) core.Limit {
	return core.Limit{Algorithm: core.FixedWindow, Quota: q, Window: w}
}

func sliding(q int64, w time.Duration) core.Limit {
	return core.Limit{Algorithm: core.SlidingWindow, Quota: q, Window: w}
}

func slidingLog(q int64, w time.Duration) core.Limit {
	return core.Limit{Algorithm: core.SlidingLog, Quota: q, Window: w}
}

func token(q int64, w time.Duration, burst int64) core.Limit {
	return core.Limit{Algorithm: core.TokenBucket, Quota: q, Window: w, Burst: burst}
}

func leaky(q int64, w time.Duration, burst int64, maxWait time.Duration) core.Limit {
	return core.Limit{Algorithm: core.LeakyBucket, Quota: q, Window: w, Burst: burst, MaxWait: maxWait}
}

// conc is a concurrency limit; the differential runs keep its lease
// longer than the time they cover (timeStep moves the clock by seconds at
// most for it), since the memory store keeps no lease.
func conc(q int64, lease time.Duration) core.Limit {
	return core.Limit{Algorithm: core.Concurrency, Quota: q, Window: lease}
}

// differentialSets are the budgets driven per algorithm, and a mixed set.
var differentialSets = map[string][]diffBudget{
	"fixed_window": {
		{"fa", []core.Limit{fixed(5, time.Second), fixed(3, time.Second)}},
		{"fb", []core.Limit{fixed(7, 7*time.Millisecond)}},
		{"fc", []core.Limit{fixed(1_000_000_000, time.Hour)}},
	},
	"sliding_window": {
		{"sa", []core.Limit{sliding(10, 2*time.Second), sliding(4, 2*time.Second)}},
		{"sb", []core.Limit{sliding(3, 1003*time.Millisecond)}},
		// 2×quota×window(ms) close to 2^53.
		{"sc", []core.Limit{sliding(1_250_000_000, time.Hour)}},
	},
	"sliding_log": {
		{"la", []core.Limit{slidingLog(8, 1500*time.Millisecond), slidingLog(5, 1500*time.Millisecond)}},
		{"lb", []core.Limit{slidingLog(3, 10*time.Millisecond)}},
		{"lc", []core.Limit{slidingLog(100_000, time.Hour)}},
	},
	"token_bucket": {
		{"ta", []core.Limit{token(10, time.Second, 4), token(3, time.Second, 4)}},
		{"tb", []core.Limit{token(7, 1003*time.Millisecond, 7)}},
		// burst × T = 1.08e15 µs, close to the store's bound of 2^50.
		{"tc", []core.Limit{token(1, time.Hour, 300_000)}},
	},
	"leaky_bucket": {
		{"ka", []core.Limit{leaky(5, time.Second, 1, 500*time.Millisecond), leaky(2, time.Second, 1, 500*time.Millisecond)}},
		{"kb", []core.Limit{leaky(3, 10*time.Millisecond, 2, 7*time.Millisecond)}},
		{"kc", []core.Limit{leaky(1000, time.Minute, 50, time.Second)}},
	},
	// A concurrency budget never changes to another algorithm here: the
	// memory store then starts afresh while Redis keeps the live slots in
	// their own key (see core.Concurrency).
	"concurrency": {
		{"ca", []core.Limit{conc(3, 24*time.Hour), conc(5, 12*time.Hour)}},
		{"cb", []core.Limit{conc(1, 24*time.Hour)}},
		{"cc", []core.Limit{conc(2000, 24*time.Hour)}},
	},
	// What a budget's Scale (core.Scaler) makes of one budget as its
	// factor moves (1, 0.5, 0.2, back to 1): the quota, and a token
	// bucket's burst with it, falls and rises on the same state.
	"scaled": {
		{"xa", []core.Limit{fixed(10, time.Second), fixed(5, time.Second), fixed(2, time.Second), fixed(10, time.Second)}},
		{"xb", []core.Limit{sliding(10, time.Second), sliding(5, time.Second), sliding(2, time.Second), sliding(10, time.Second)}},
		{"xc", []core.Limit{token(10, time.Second, 10), token(5, time.Second, 5), token(2, time.Second, 2), token(10, time.Second, 10)}},
		{"xd", []core.Limit{leaky(10, time.Second, 2, 400*time.Millisecond), leaky(5, time.Second, 2, 400*time.Millisecond), leaky(2, time.Second, 2, 400*time.Millisecond)}},
		{"xe", []core.Limit{slidingLog(10, time.Second), slidingLog(5, time.Second), slidingLog(2, time.Second)}},
	},
	"mixed": {
		{"me", []core.Limit{conc(2, 24*time.Hour), conc(4, 24*time.Hour)}},
		{"ma", []core.Limit{fixed(4, time.Second), sliding(4, time.Second), slidingLog(4, time.Second)}},
		{"mb", []core.Limit{token(6, time.Second, 3), leaky(6, time.Second, 2, 300*time.Millisecond), token(6, 2*time.Second, 3)}},
		{"mc", []core.Limit{sliding(9, 1500*time.Millisecond), slidingLog(9, 1500*time.Millisecond), fixed(9, 3*time.Second)}},
		{"md", []core.Limit{fixed(2, 5*time.Millisecond)}},
	},
}

// partitions include ones the store hashes (spaces, braces, length).
var diffPartitions = []string{"k1", "tenant:42", "2001:db8::1", "has space", "br{ace}", strings.Repeat("x", 100), ""}

type takeRecord struct {
	items []core.Item
	mem   []core.Outcome
	red   []core.Outcome
}

func TestDifferential(t *testing.T) {
	_, client := startServer(t)
	ops := 2500
	if testing.Short() {
		ops = 400
	}
	for name, set := range differentialSets {
		t.Run(name, func(t *testing.T) {
			var cov coverage
			for seed := uint64(1); seed <= 3; seed++ {
				runDifferential(t, client, set, seed, ops, &cov)
			}
			cov.check(t)
		})
	}
}

// TestDifferentialCluster drives the cluster store, whose takes span
// several hash slots (and so the undo of a group's charges), against the
// memory store.
func TestDifferentialCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	client := newClusterClient(t, cl.Addrs())
	for name, set := range differentialSets {
		t.Run(name, func(t *testing.T) {
			var cov coverage
			for seed := uint64(7); seed <= 8; seed++ {
				runDifferential(t, client, set, seed, 800, &cov)
			}
			cov.check(t)
			if cov.undone == 0 && len(set) > 1 {
				t.Errorf("no take was undone across slots")
			}
		})
	}
}

// TestDifferentialRing: a go-redis Ring spreads hash tags over servers;
// the store groups items by tag.
func TestDifferentialRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.Addr(), "b": b.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { ring.Close() })
	for _, name := range []string{"mixed", "sliding_log", "token_bucket"} {
		t.Run(name, func(t *testing.T) {
			var cov coverage
			runDifferential(t, ring, differentialSets[name], 11, 600, &cov)
			cov.check(t)
		})
	}
	// Both servers hold state: the ring did spread the keys.
	for _, s := range []*redistest.Server{a, b} {
		if n := s.CLI("DBSIZE"); n == "0" {
			t.Errorf("server %s holds no keys", s.Addr())
		}
	}
}

// coverage counts what a differential run exercised, so that a run that
// never denies (or never refunds) fails instead of passing vacuously.
type coverage struct {
	takes, allowed, denied, shadowDenied, uncharged, refunds, undone, delayed int
}

func (c *coverage) check(t *testing.T) {
	t.Helper()
	t.Logf("coverage: %+v", *c)
	if c.allowed == 0 || c.denied == 0 || c.uncharged == 0 || c.refunds == 0 || c.shadowDenied == 0 {
		t.Errorf("differential run did not exercise every path: %+v", *c)
	}
}

func runDifferential(t *testing.T, client redis.UniversalClient, set []diffBudget, seed uint64, ops int, cov *coverage) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(len(set))))
	clock := newFakeClock(t0 + rng.Int64N(1_000_000_000))
	mem := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
	defer mem.Close()
	prefix := fmt.Sprintf("diff:%s:%d:", t.Name(), seed)
	// The fake clock stands still while real time passes: keep Redis from
	// expiring keys the fake time still needs.
	useFakeTime(t, client, clock, 10*time.Minute)
	red := mustStore(t, client, Config{Prefix: prefix, Timeout: 5 * time.Second})
	ctx := context.Background()

	current := make([]int, len(set)) // index of each budget's limit in use
	var history []takeRecord
	for op := 0; op < ops; op++ {
		switch r := rng.IntN(100); {
		case r < 8: // change a budget's limit
			b := rng.IntN(len(set))
			current[b] = rng.IntN(len(set[b].limits))
		case r < 18 && len(history) > 0: // refund an earlier take
			h := history[rng.IntN(len(history))]
			if err := mem.Refund(ctx, h.items, h.mem); err != nil {
				t.Fatal(err)
			}
			if err := red.Refund(ctx, h.items, h.red); err != nil {
				t.Fatalf("seed %d op %d: redis refund: %v", seed, op, err)
			}
			cov.refunds++
			// A concurrency slot is given back once (the engine never
			// refunds a result twice): the memory store counts slots and
			// cannot tell a second refund from a first, Redis removes
			// the slot's id.
			for j := range h.items {
				if h.items[j].Limit.Algorithm == core.Concurrency {
					h.mem[j].Charged, h.red[j].Charged = false, false
				}
			}
		case r < 55: // advance time
			clock.add(timeStep(rng, set, current, clock.micros()))
		default: // take
			n := 1 + rng.IntN(min(4, len(set)))
			perm := rng.Perm(len(set))[:n]
			items := make([]core.Item, n)
			for j, b := range perm {
				l := set[b].limits[current[b]]
				capacity := l.Capacity()
				var cost int64
				switch rng.IntN(6) {
				case 0:
					cost = 0
				case 1:
					cost = capacity
				case 2:
					cost = rng.Int64N(capacity + 1)
				default:
					cost = 1 + rng.Int64N(min(3, capacity))
				}
				items[j] = item(set[b].name, diffPartitions[rng.IntN(len(diffPartitions))], l, cost, rng.IntN(5) == 0)
			}
			mo := make([]core.Outcome, n)
			ro := make([]core.Outcome, n)
			if err := mem.Take(ctx, items, mo); err != nil {
				t.Fatal(err)
			}
			if err := red.Take(ctx, items, ro); err != nil {
				t.Fatalf("seed %d op %d: redis take: %v", seed, op, err)
			}
			for j := range items {
				m, r := mo[j], ro[j]
				if items[j].Limit.Algorithm == core.Concurrency && r.Charged {
					// Redis's stamp is the slot's id: unique in its key,
					// so possibly later than the take's time.
					if r.Stamp < m.Stamp {
						t.Fatalf("seed %d op %d: slot id %d before the take's time %d", seed, op, r.Stamp, m.Stamp)
					}
					r.Stamp = m.Stamp
				}
				if m != r {
					for k := range items {
						t.Logf("item %d: %+v\n mem %+v\n red %+v", k, items[k], mo[k], ro[k])
					}
					t.Fatalf("seed %d op %d at t0+%dµs: item %d differs", seed, op, clock.micros()-t0, j)
				}
			}
			cov.takes++
			denied := false
			for j := range items {
				switch {
				case !mo[j].Allowed && items[j].Shadow:
					cov.shadowDenied++
				case !mo[j].Allowed:
					denied = true
				}
				if mo[j].Delay > 0 {
					cov.delayed++
				}
			}
			if denied {
				cov.denied++
				for j := range items {
					if mo[j].Allowed {
						cov.uncharged++
					}
				}
				if red.mode != modeSingle && slotsOf(red, items) > 1 {
					cov.undone++
				}
			} else {
				cov.allowed++
			}
			history = append(history, takeRecord{items, mo, ro})
			if len(history) > 50 {
				history = history[1:]
			}
		}
	}
	if n := assertTTLs(t, client, prefix); n == 0 && ops > 100 {
		t.Errorf("no keys left at all; the test did not exercise the store")
	}
}

// slotsOf returns how many hash slots the items' keys span.
func slotsOf(s *Store, items []core.Item) int {
	seen := map[int]bool{}
	for _, it := range items {
		_, a, b := buildKey(s.prefix, it.Key, it.Budget)
		seen[slotOf(s.LogKey(it.Budget, it.Key)[a:b])] = true
	}
	return len(seen)
}

// timeStep picks how far to move the clock: nothing, a microsecond, a
// little, exactly to (or around) a window boundary or emission interval of
// one of the budgets, or several windows.
func timeStep(rng *rand.Rand, set []diffBudget, current []int, now int64) int64 {
	b := rng.IntN(len(set))
	l := set[b].limits[current[b]]
	w := l.Window.Microseconds()
	if l.Algorithm == core.Concurrency {
		w = 1_000_000 // a lease is not a window; stay well within it
	}
	switch rng.IntN(9) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return rng.Int64N(max(w/10, 2))
	case 3, 4: // to the next boundary, or a microsecond either side
		next := (now/w + 1) * w
		return next - now + rng.Int64N(3) - 1
	case 5: // to the next millisecond boundary
		return 1000 - now%1000
	case 6:
		if iv := l.Interval(); iv > 0 {
			return iv * (1 + rng.Int64N(2))
		}
		return rng.Int64N(w)
	case 7:
		return rng.Int64N(3 * w)
	default:
		return rng.Int64N(1000)
	}
}
