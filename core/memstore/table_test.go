package memstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// The table agrees with a map through inserts, lookups and deletes, with
// hashes chosen to collide: few distinct home slots, and distinct keys
// sharing one whole hash.
func TestMemTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab memTable
	ref := map[string]*memEntry{}
	hashOf := func(k string) uint64 {
		n, _ := strconv.Atoi(k)
		return uint64(n%5) << 32 // five hashes for every key
	}
	check := func(step int) {
		t.Helper()
		if tab.n != len(ref) {
			t.Fatalf("step %d: table holds %d, map %d", step, tab.n, len(ref))
		}
		for i := 0; i < 200; i++ {
			k := strconv.Itoa(i)
			if got := tab.lookup(hashOf(k), k); got != ref[k] {
				t.Fatalf("step %d: lookup %q = %p, want %p", step, k, got, ref[k])
			}
		}
	}
	for step := 0; step < 20_000; step++ {
		k := strconv.Itoa(rng.IntN(200))
		h := hashOf(k)
		if e := ref[k]; e != nil && rng.IntN(2) == 0 {
			i := tab.slotOf(h, e)
			if i < 0 {
				t.Fatalf("step %d: no slot for %q", step, k)
			}
			tab.delete(i)
			delete(ref, k)
		} else if e == nil {
			e := newMemEntry(k, &memBudget{}, &core.Limit{Quota: 1, Window: time.Second})
			tab.insert(h, e)
			ref[k] = e
		}
		if step%97 == 0 {
			check(step)
		}
		if step%1000 == 999 {
			tab.shrink()
			check(step)
		}
	}
	check(-1)
}

// Removing entries while walking the slots, as sweep does, looks at every
// entry once or more and keeps every entry it does not remove reachable.
func TestMemTableDeleteWhileWalking(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var tab memTable
		keys := map[string]uint64{}
		for i := 0; i < 48; i++ {
			k := strconv.Itoa(i)
			h := uint64(rng.IntN(64)) << 32 // homes all over a table of 64, wrapping at its end
			tab.insert(h, newMemEntry(k, &memBudget{}, &core.Limit{Quota: 1, Window: time.Second}))
			keys[k] = h
		}
		drop := func(k string) bool { n, _ := strconv.Atoi(k); return n%3 == 0 }
		seen := map[string]bool{}
		for i := 0; i < len(tab.slots); {
			e := tab.slots[i].e.Load()
			if e == nil {
				i++
				continue
			}
			seen[e.key()] = true
			if drop(e.key()) {
				tab.delete(i)
				continue
			}
			i++
		}
		for k, h := range keys {
			if !seen[k] {
				t.Fatalf("seed %d: the walk missed %q", seed, k)
			}
			if got := tab.lookup(h, k); (got != nil) == drop(k) {
				t.Fatalf("seed %d: after the walk lookup %q = %v", seed, k, got)
			}
		}
	}
}

// A take on the shard's hot entry after that entry was removed does not
// charge the removed entry: it finds the key afresh.
func TestMemoryStoreHotEntryRemoved(t *testing.T) {
	c := &usClock{us: 1_750_000_000_000_000}
	s := MustNew(Config{Clock: c, Shards: 1, SweepInterval: -1})
	ctx := context.Background()
	it := []core.Item{{Budget: "b", Key: "k", Limit: core.Limit{Quota: 3, Window: time.Second}, Cost: 1}}
	var o [1]core.Outcome
	for i := 0; i < 3; i++ { // the second take makes the entry the shard's hot one
		if err := s.Take(ctx, it, o[:]); err != nil || !o[0].Charged {
			t.Fatalf("take %d: %+v %v", i, o[0], err)
		}
	}
	old := s.entryOf("b", "k")
	if s.shards[0].hot.e.Load() != old || s.top.e.Load() != old {
		t.Fatal("the entry did not become the shard's hot entry and the store's top one")
	}
	c.us += 2_000_000
	if n := s.Sweep(); n != 1 {
		t.Fatalf("swept %d entries, want 1", n)
	}
	dead := old.dead()
	if !dead || s.shards[0].hot.e.Load() != nil || s.top.e.Load() != nil {
		t.Fatalf("removed entry: dead %v, still hot %v, still top %v", dead, s.shards[0].hot.e.Load() != nil, s.top.e.Load() != nil)
	}
	// Put the removed entry back as the hot and top one, as a take that
	// loaded it just before the sweep holds it: the take must look again.
	s.shards[0].hot.set(old, s.hash("k"))
	s.top.set(old, 0)
	if err := s.Take(ctx, it, o[:]); err != nil || !o[0].Charged || o[0].Remaining != 2 {
		t.Fatalf("take after removal: %+v %v", o[0], err)
	}
	if e := s.entryOf("b", "k"); e == nil || e == old || s.Len() != 1 {
		t.Fatalf("after removal: entry %p (old %p), %d held", e, old, s.Len())
	}
}

// Takes on one key from many goroutines, through the hot entry, the
// shard's lock and multi-item takes, while the shard evicts and sweeps
// around it, charge exactly the quota.
func TestMemoryStoreHotKeyExactUnderChurn(t *testing.T) {
	// The clock moves only as the flood goroutine moves it, 1 ms a key: 4 s
	// in all, well inside the hot key's hour however slow the machine.
	clock := &steppedClock{}
	clock.us.Store(1_750_000_000_000_000 / 3_600_000_000 * 3_600_000_000)
	s := MustNew(Config{Clock: clock, Shards: 1, MaxEntries: 64, SweepInterval: -1})
	ctx := context.Background()
	const quota, workers, tries = 3000, 4, 1000
	hot := core.Item{Budget: "hot", Key: "k", Limit: core.Limit{Quota: quota, Window: time.Hour}, Cost: 1}
	var mu sync.Mutex
	charged := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; i < tries; i++ {
				items := []core.Item{hot}
				if i%4 == w%4 { // a multi-item take with a flood key
					items = append(items, core.Item{Budget: "flood", Key: "m" + strconv.Itoa(w) + "-" + strconv.Itoa(i), Limit: core.Limit{Quota: 1, Window: time.Hour}, Cost: 1})
				}
				out := make([]core.Outcome, len(items))
				if err := s.Take(ctx, items, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Charged {
					n++
				}
			}
			mu.Lock()
			charged += n
			mu.Unlock()
		}()
	}
	wg.Add(1)
	go func() { // a flood of new keys in another budget, and sweeps
		defer wg.Done()
		var o [1]core.Outcome
		for i := 0; i < 4000; i++ {
			clock.us.Add(1000) // the previous flood key's window ends
			_ = s.Take(ctx, []core.Item{{Budget: "flood", Key: strconv.Itoa(i), Limit: core.Limit{Quota: 1, Window: time.Millisecond}, Cost: 1}}, o[:])
			if i%100 == 0 {
				s.Sweep()
			}
		}
	}()
	wg.Wait()
	if charged != quota {
		t.Fatalf("%d takes charged against a quota of %d", charged, quota)
	}
	if n := s.BudgetEvictions("hot"); n != 0 {
		t.Fatalf("the hot key was evicted %d times", n)
	}
}

// slotOf returns the slot index of e, whose key hashes to h, or -1.
func (t *memTable) slotOf(h uint64, e *memEntry) int {
	if len(t.slots) == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(h); t.slots[i].e.Load() != nil; i = (i + 1) & mask {
		if t.slots[i].e.Load() == e {
			return i
		}
	}
	return -1
}

// steppedClock is a Clock that tests move by hand from any goroutine, in
// Unix microseconds.
type steppedClock struct{ us atomic.Int64 }

func (c *steppedClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Takes over many keys, which find their entries without the shard's
// lock, charge exactly each key's quota while the same tables grow, shift
// entries back on deletes, shrink and are swept under them, and while
// shards add other budgets' tables.
func TestMemoryStoreManyKeysExactWhileTablesChange(t *testing.T) {
	// The clock moves only as the churn goroutine moves it, 1 ms a key:
	// 3 s in all, well inside the keys' hour.
	clock := &steppedClock{}
	clock.us.Store(1_750_000_000_000_000 / 3_600_000_000 * 3_600_000_000)
	s := MustNew(Config{Clock: clock, Shards: 4, SweepInterval: -1})
	ctx := context.Background()
	const keys, quota, workers, rounds = 500, 5, 4, 3
	l := core.Limit{Quota: quota, Window: time.Hour}
	charged := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var o [1]core.Outcome
			for r := 0; r < rounds; r++ {
				for _, k := range rng.Perm(keys) {
					budget := "w" + strconv.Itoa(k%4) // tables the shards add as the takes run
					if err := s.Take(ctx, []core.Item{{Budget: budget, Key: "k" + strconv.Itoa(k), Limit: l, Cost: 1}}, o[:]); err != nil {
						t.Error(err)
						return
					}
					if o[0].Charged {
						charged[k].Add(1)
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // short-lived keys in the same budgets and in three more, and sweeps
		defer wg.Done()
		var o [1]core.Outcome
		for i := 0; i < 3000; i++ {
			clock.us.Add(1000) // the previous churn key's window ends
			budget := "w" + strconv.Itoa(i%4)
			if i%2 == 1 {
				budget = "c" + strconv.Itoa(i%3)
			}
			_ = s.Take(ctx, []core.Item{{Budget: budget, Key: "c" + strconv.Itoa(i), Limit: core.Limit{Quota: 1, Window: time.Millisecond}, Cost: 1}}, o[:])
			if i%50 == 0 {
				s.Sweep()
			}
		}
	}()
	wg.Wait()
	for k := range charged {
		if n := charged[k].Load(); n != quota {
			t.Fatalf("key k%d: %d takes charged against a quota of %d", k, n, quota)
		}
	}
}
