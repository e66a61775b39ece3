package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func TestMemoryStoreNoAllocationForExistingKey(t *testing.T) {
	for _, l := range []core.Limit{
		{Algorithm: core.FixedWindow, Quota: 1e9, Window: time.Hour},
		{Algorithm: core.SlidingWindow, Quota: 1e9, Window: time.Hour},
		{Algorithm: core.TokenBucket, Quota: 1e9, Window: time.Hour, Burst: 1e12},
		{Algorithm: core.LeakyBucket, Quota: 1e9, Window: time.Hour, Burst: 1e12, MaxWait: time.Second},
	} {
		s := newStore(t, nil)
		items := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 1}, {Budget: "c", Key: "other", Limit: l, Cost: 1}}
		out := make([]core.Outcome, 2)
		ctx := context.Background()
		_ = s.Take(ctx, items, out)
		if n := testing.AllocsPerRun(1000, func() { _ = s.Take(ctx, items[:1], out) }); n != 0 {
			t.Errorf("%s: %v allocations per single-budget take", l.Algorithm, n)
		}
		if n := testing.AllocsPerRun(1000, func() { _ = s.Take(ctx, items, out) }); n != 0 {
			t.Errorf("%s: %v allocations per two-budget take", l.Algorithm, n)
		}
	}
}

func TestMemoryStoreCapEvicts(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 64, Shards: 4, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Minute}
	for i := 0; i < 10_000; i++ {
		if o := take(t, s, l, "k"+strconv.Itoa(i), 1); !o.Allowed {
			t.Fatalf("new key %d denied", i)
		}
	}
	if n := s.Len(); n > 64 {
		t.Fatalf("%d entries held, cap 64", n)
	}
	if s.Evictions() < 10_000-64 {
		t.Fatalf("%d evictions", s.Evictions())
	}
	// Expired entries are evicted before live ones and do not count as
	// evictions.
	c.Advance(time.Hour)
	before := s.Evictions()
	for i := 0; i < 16; i++ { // at most a shard's worth, wherever they land
		take(t, s, l, "fresh"+strconv.Itoa(i), 1)
	}
	if s.Evictions() != before {
		t.Fatalf("%d live evictions while expired entries were there", s.Evictions()-before)
	}
}

// At the cap, a take over several budgets never evicts an entry it has
// just charged: that charge would be lost.
func TestMemoryStoreCapKeepsTheTakesOwnEntries(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 1, Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 1, Window: time.Minute}
	items := []core.Item{{Budget: "a", Key: "k", Limit: l, Cost: 1}, {Budget: "b", Key: "k", Limit: l, Cost: 1}}
	out := make([]core.Outcome, 2)
	if err := s.Take(ctx, items, out); err != nil || !out[0].Charged || !out[1].Charged {
		t.Fatalf("first take: %v %+v", err, out)
	}
	for i := range items {
		if err := s.Take(ctx, items[i:i+1], out); err != nil || out[0].Allowed {
			t.Fatalf("budget %s after its one unit was spent: %v %+v (its charge was lost)", items[i].Budget, err, out[0])
		}
	}
}

// Making room at the cap sweeps expired entries; an expired entry that the
// same take is about to charge must survive the sweep, or the charge goes
// to an entry no longer in the store.
func TestMemoryStoreCapSweepKeepsTheTakesEntries(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 2, Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	minute := core.Limit{Algorithm: core.FixedWindow, Quota: 1, Window: time.Minute}
	hour := core.Limit{Algorithm: core.FixedWindow, Quota: 1, Window: time.Hour}
	out := make([]core.Outcome, 2)
	for _, it := range []core.Item{{Budget: "c", Key: "k", Limit: hour, Cost: 1}, {Budget: "a", Key: "k", Limit: minute, Cost: 1}} {
		if err := s.Take(ctx, []core.Item{it}, out); err != nil || !out[0].Allowed {
			t.Fatalf("%s: %v %+v", it.Budget, err, out[0])
		}
	}
	c.Advance(61 * time.Second) // a's entry expires; c's does not
	items := []core.Item{{Budget: "b", Key: "k", Limit: minute, Cost: 1}, {Budget: "a", Key: "k", Limit: minute, Cost: 1}}
	if err := s.Take(ctx, items, out); err != nil || !out[0].Charged || !out[1].Charged {
		t.Fatalf("take at the cap: %v %+v", err, out)
	}
	if err := s.Take(ctx, items[1:], out); err != nil || out[0].Allowed {
		t.Fatalf("budget a after its one unit was spent: %v %+v (its charge was lost)", err, out[0])
	}
}

func TestMemoryStoreFloodStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys")
	}
	// A million new keys against a cap of 100,000; a fifth of both under
	// the race detector.
	capacity, perWorker := 100_000, 250_000
	if raceEnabled {
		capacity, perWorker = 20_000, 50_000
	}
	s, err := memstore.New(memstore.Config{MaxEntries: capacity, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Hour}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]core.Outcome, 1)
			for i := 0; i < perWorker; i++ {
				k := strconv.Itoa(g) + "/" + strconv.Itoa(i)
				_ = s.Take(context.Background(), []core.Item{{Budget: "b", Key: k, Limit: l, Cost: 1}}, out)
			}
		}()
	}
	wg.Wait()
	if n := s.Len(); n > capacity+256 { // the cap is per shard, rounded up
		t.Fatalf("%d keys held after a flood of %d, cap %d", n, 4*perWorker, capacity)
	}
	runtime.KeepAlive(s)
}

func TestMemoryStoreSweep(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	take(t, s, core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Minute}, "a", 1)
	take(t, s, core.Limit{Algorithm: core.TokenBucket, Quota: 10, Window: time.Minute, Burst: 10}, "b", 1)
	take(t, s, core.Limit{Algorithm: core.SlidingWindow, Quota: 10, Window: time.Minute}, "c", 1)
	take(t, s, core.Limit{Algorithm: core.SlidingLog, Quota: 10, Window: time.Minute}, "d", 1)
	c.Advance(5 * time.Second)
	if n := s.Sweep(); n != 0 {
		t.Fatalf("swept %d live entries", n)
	}
	// At 60 s the fixed window has ended, the bucket is full again (since
	// 6 s) and the log's entry has left its window.
	c.Advance(55 * time.Second)
	if n := s.Sweep(); n != 3 || s.Len() != 1 {
		t.Fatalf("swept %d, %d left", n, s.Len())
	}
	// The sliding counter's count weighs until the end of the next window.
	c.Advance(59 * time.Second)
	if n := s.Sweep(); n != 0 {
		t.Fatalf("swept the sliding counter %d early", n)
	}
	c.Advance(time.Second)
	if n := s.Sweep(); n != 1 || s.Len() != 0 {
		t.Fatalf("swept %d, %d left", n, s.Len())
	}
}

func TestMemoryStoreSweeperStops(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := memstore.New(memstore.Config{SweepInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // idempotent
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before", n, before)
	}
}

func TestMemoryStoreConfigErrors(t *testing.T) {
	if _, err := memstore.New(memstore.Config{Shards: 3}); err == nil {
		t.Fatal("3 shards accepted")
	}
	if _, err := memstore.New(memstore.Config{MaxEntries: -1}); err == nil {
		t.Fatal("negative cap accepted")
	}
}

func TestMemoryStoreRejectsInvalidItems(t *testing.T) {
	s := newStore(t, newFakeClock(t0))
	out := make([]core.Outcome, 1)
	for _, it := range []core.Item{
		{Budget: "b", Key: "k", Limit: core.Limit{Algorithm: core.FixedWindow, Quota: 0, Window: time.Minute}, Cost: 1},
		{Budget: "b", Key: "k", Limit: core.Limit{Algorithm: core.FixedWindow, Quota: 5, Window: 0}, Cost: 1},
		{Budget: "b", Key: "k", Limit: core.Limit{Algorithm: core.SlidingLog, Quota: 5, Window: time.Minute}, Cost: 6},
		{Budget: "b", Key: "k", Limit: core.Limit{Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute}, Cost: 1},
		{Budget: "b", Key: "k", Limit: core.Limit{Algorithm: core.FixedWindow, Quota: 5, Window: time.Minute}, Cost: -1},
	} {
		if err := s.Take(context.Background(), []core.Item{it}, out); err == nil {
			t.Errorf("accepted %+v", it)
		}
	}
	// The same budget and key twice in one take: one charge would be lost.
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 5, Window: time.Minute}
	twice := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 1}, {Budget: "c", Key: "k", Limit: l, Cost: 1}, {Budget: "b", Key: "k", Limit: l, Cost: 1}}
	if err := s.Take(context.Background(), twice, make([]core.Outcome, 3)); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("a take repeating budget b for key k: %v", err)
	}
	if o := take(t, s, l, "k", 1); o.Remaining != 4 {
		t.Errorf("the refused take charged something: remaining %d", o.Remaining)
	}
}
