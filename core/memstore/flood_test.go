package memstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// evictionCounter is an Observer that counts the evictions a memory store
// reports, per budget.
type evictionCounter struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (c *evictionCounter) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {
}
func (c *evictionCounter) ObserveError(core.ErrorKind, string, error) {}
func (c *evictionCounter) ObserveEviction(budget string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]uint64{}
	}
	c.n[budget]++
}

func (c *evictionCounter) get(budget string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[budget]
}

func pathKey(r *core.Request) (string, error) { return r.Path, nil }

// A flood of new keys in one budget, at a small cap, never gives another
// budget's keys more than their quota, whatever the windows: victims of a
// 10 s, 1 min and 1 h fixed window, floods in a 2 h budget (longer than
// every victim's window) and in a 5 s budget (shorter). Each victim key
// asks for more than its quota in every window and must get exactly its
// quota: not more (an eviction reset its count) and not less.
func TestMemoryStoreFloodCannotResetOtherBudgets(t *testing.T) {
	victims := []core.Budget{
		{Name: "v10s", Quota: 2, Window: 10 * time.Second, Key: pathKey},
		{Name: "v1m", Quota: 3, Window: time.Minute, Key: pathKey},
		{Name: "v1h", Quota: 5, Window: time.Hour, Key: pathKey},
	}
	floods := []core.Budget{
		{Name: "flood2h", Quota: 1e6, Window: 2 * time.Hour, Key: remoteAddrKey},
		{Name: "flood5s", Quota: 1e6, Window: 5 * time.Second, Key: remoteAddrKey},
	}
	tenants := []string{"acme", "globex", "initech"}
	for _, cfg := range []struct{ max, shards int }{{64, 1}, {128, 4}} {
		t.Run("max="+strconv.Itoa(cfg.max)+"/shards="+strconv.Itoa(cfg.shards), func(t *testing.T) {
			c := newFakeClock(t0)
			obs := &evictionCounter{}
			s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: cfg.max, Shards: cfg.shards, SweepInterval: -1, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			e, err := core.New(core.Config{Store: s, Clock: c, Budgets: append(append([]core.Budget{}, victims...), floods...)})
			if err != nil {
				t.Fatal(err)
			}
			layers := map[string]*core.Layer{}
			for _, b := range append(append([]core.Budget{}, victims...), floods...) {
				layers[b.Name] = e.MustLayer(core.Use(b.Name))
			}
			type window struct {
				budget, tenant string
				start          int64
			}
			admitted := map[window]int64{}
			flooded := 0
			const step = 10 * time.Second
			for i := 0; i < int(130*time.Minute/step); i++ {
				now := c.Now()
				for _, v := range victims {
					for _, tn := range tenants {
						for range 3 { // 3 per 10 s: more than every victim's quota
							if d := decide(layers[v.Name], &core.Request{Method: "GET", Path: tn}); d.Allowed {
								w := window{v.Name, tn, now.Truncate(v.Window).UnixMicro()}
								admitted[w]++
								if admitted[w] > v.Quota {
									t.Fatalf("%v: %s/%s admitted %d in the window from %v, quota %d",
										now.Sub(t0), v.Name, tn, admitted[w], time.UnixMicro(w.start).UTC(), v.Quota)
								}
							}
						}
					}
				}
				// Then 2×cap new keys in a flood budget: long, short, or
				// both, by turn.
				turn := [][]core.Budget{floods[:1], floods[1:], floods}[i%3]
				for _, f := range turn {
					for k := 0; k < 2*cfg.max; k++ {
						flooded++
						if d := decide(layers[f.Name], request("GET", "2001:db8:"+strconv.Itoa(flooded)+"::1")); !d.Allowed {
							t.Fatalf("flood key %d denied", flooded)
						}
					}
				}
				c.Advance(step)
			}
			// Exact, not only bounded: every window that ended got exactly
			// the quota.
			end := c.Now()
			for _, v := range victims {
				for _, tn := range tenants {
					for ws := t0; !ws.Add(v.Window).After(end); ws = ws.Add(v.Window) {
						if n := admitted[window{v.Name, tn, ws.UnixMicro()}]; n != v.Quota {
							t.Fatalf("%s/%s admitted %d in the window from %v, quota %d", v.Name, tn, n, ws, v.Quota)
						}
					}
				}
				if n := s.BudgetEvictions(v.Name); n != 0 || obs.get(v.Name) != 0 {
					t.Errorf("%s: %d evictions (observer: %d)", v.Name, n, obs.get(v.Name))
				}
			}
			if s.BudgetEvictions("flood2h") == 0 {
				t.Fatal("the long flood evicted nothing: the cap was never reached")
			}
			for _, f := range floods {
				if got, want := obs.get(f.Name), s.BudgetEvictions(f.Name); got != want {
					t.Errorf("%s: observer told of %d evictions, store counted %d", f.Name, got, want)
				}
			}
			if got := s.BudgetEvictions("flood2h") + s.BudgetEvictions("flood5s"); s.Evictions() != got {
				t.Errorf("store total %d, budgets %d", s.Evictions(), got)
			}
			if n := s.Len(); n > cfg.max+cfg.shards {
				t.Errorf("%d entries held, cap %d", n, cfg.max)
			}
		})
	}
}

// Within a flooded budget, eviction gives away the least: a key that has
// spent more than the flood's keys keeps its count, and entries holding
// nothing (cost-0 takes) go first and are not counted as evictions.
func TestMemoryStoreFloodEvictsTheLeastSpent(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 32, Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Hour}
	for range 4 {
		take(t, s, l, "heavy", 1)
	}
	for i := 0; i < 8; i++ {
		take(t, s, l, "peek"+strconv.Itoa(i), 0) // an entry holding nothing
	}
	for i := 0; i < 1000; i++ {
		if o := take(t, s, l, "flood"+strconv.Itoa(i), 1); !o.Allowed {
			t.Fatalf("flood key %d denied", i)
		}
	}
	// 1 + 8 + 1000 keys through 32 places: the 8 empty entries went for
	// free, then 1009-32-8 = 969 live flood keys were evicted.
	if got, want := s.Evictions(), uint64(1+8+1000-32-8); got != want {
		t.Errorf("%d evictions, want %d", got, want)
	}
	if o := take(t, s, l, "heavy", 0); o.Remaining != 6 {
		t.Fatalf("heavy key: remaining %d after spending 4 of 10 (its count was evicted)", o.Remaining)
	}
}

// A budget whose keys outnumber its share evicts its own entries, even
// when another budget's entries expire sooner.
func TestMemoryStoreBudgetAboveItsShareEvictsItsOwn(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 16, Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	short := core.Limit{Algorithm: core.FixedWindow, Quota: 1, Window: time.Second}
	long := core.Limit{Algorithm: core.TokenBucket, Quota: 100, Window: 24 * time.Hour, Burst: 100}
	out := make([]core.Outcome, 1)
	for i := 0; i < 8; i++ { // exactly its share of 16 between two budgets
		if err := s.Take(ctx, []core.Item{{Budget: "tight", Key: "t" + strconv.Itoa(i), Limit: short, Cost: 1}}, out); err != nil || !out[0].Charged {
			t.Fatal(err, out[0])
		}
	}
	for i := 0; i < 500; i++ {
		if err := s.Take(ctx, []core.Item{{Budget: "wide", Key: "w" + strconv.Itoa(i), Limit: long, Cost: 1}}, out); err != nil || !out[0].Charged {
			t.Fatal(err, out[0])
		}
	}
	for i := 0; i < 8; i++ {
		if err := s.Take(ctx, []core.Item{{Budget: "tight", Key: "t" + strconv.Itoa(i), Limit: short, Cost: 1}}, out); err != nil || out[0].Allowed {
			t.Fatalf("tight key %d after a flood in wide: allowed again within its window (%v)", i, err)
		}
	}
	if n := s.BudgetEvictions("tight"); n != 0 {
		t.Errorf("tight: %d evictions", n)
	}
	if n := s.BudgetEvictions("wide"); n != 500-8 {
		t.Errorf("wide: %d evictions, want %d", n, 500-8)
	}
}

// Evictions made by multi-budget takes are reported like single ones: the
// observer hears of each, with its budget, and the per-budget counts add
// up to the store's total.
func TestMemoryStoreMultiTakeReportsEvictions(t *testing.T) {
	c := newFakeClock(t0)
	obs := &evictionCounter{}
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 8, Shards: 2, SweepInterval: -1, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 100, Window: time.Hour}
	out := make([]core.Outcome, 2)
	for i := 0; i < 200; i++ {
		k := "k" + strconv.Itoa(i)
		items := []core.Item{{Budget: "x", Key: k, Limit: l, Cost: 1}, {Budget: "y", Key: k, Limit: l, Cost: 1}}
		if err := s.Take(context.Background(), items, out); err != nil || !out[0].Charged || !out[1].Charged {
			t.Fatalf("take %d: %v %+v", i, err, out)
		}
	}
	x, y := s.BudgetEvictions("x"), s.BudgetEvictions("y")
	if x == 0 || y == 0 || x+y != s.Evictions() {
		t.Fatalf("evictions x %d, y %d, total %d", x, y, s.Evictions())
	}
	if obs.get("x") != x || obs.get("y") != y {
		t.Fatalf("observer heard x %d, y %d; store counted %d, %d", obs.get("x"), obs.get("y"), x, y)
	}
}

// When the evicting budget's sample holds an entry that gives nothing
// away (past its window), dropping it makes the room: no other budget
// loses a live entry for it.
func TestMemoryStoreFreeEntryMakesTheRoom(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 5, Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	short := core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Second}
	long := core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Hour}
	out := make([]core.Outcome, 1)
	take := func(budget, key string, l core.Limit) {
		t.Helper()
		if err := s.Take(ctx, []core.Item{{Budget: budget, Key: key, Limit: l, Cost: 1}}, out); err != nil || !out[0].Charged {
			t.Fatal(err, out[0])
		}
	}
	take("a", "a1", short)
	take("a", "a2", short)
	take("b", "b1", long)
	take("b", "b2", long)
	take("b", "b3", long) // full: 5 entries
	c.Advance(900 * time.Millisecond)
	take("b", "b4", long) // b is above its share: it evicts one of its own, after a sweep
	if n := s.BudgetEvictions("b"); n != 1 {
		t.Fatalf("b: %d evictions, want 1", n)
	}
	c.Advance(600 * time.Millisecond) // a's window has passed; no sweep yet (one a second)
	take("a", "a3", short)            // a holds its share: it drops a free entry of its own
	if n := s.BudgetEvictions("b"); n != 1 {
		t.Errorf("b: %d evictions after a new key in a, want still 1", n)
	}
	if n := s.Len(); n != 5 {
		t.Errorf("%d entries, want 5", n)
	}
}
