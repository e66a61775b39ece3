package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// TestMemoryStoreMultiTakeAtCapKeepsCharges drives random multi-item takes
// (items spread over shards, some keys new, some expired) against a small
// capped store. Right after every charged take, a cost-0 take of the same
// items must find each charge in place: no entry the take charged was swept
// or evicted by the take itself, and none was charged twice or not at all.
func TestMemoryStoreMultiTakeAtCapKeepsCharges(t *testing.T) {
	for _, shards := range []int{1, 2, 4} {
		c := newFakeClock(t0)
		s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 6, Shards: shards, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, uint64(shards)))
		limits := []core.Limit{
			{Algorithm: core.FixedWindow, Quota: 1000, Window: time.Minute},
			{Algorithm: core.SlidingWindow, Quota: 1000, Window: 2 * time.Minute},
			{Algorithm: core.TokenBucket, Quota: 1000, Window: time.Minute, Burst: 1000},
		}
		budgets := []string{"a", "b", "c", "d"}
		charged := 0
		for step := 0; step < 3000; step++ {
			if rng.IntN(10) == 0 {
				c.Advance(time.Duration(rng.IntN(90)) * time.Second) // some entries expire
			}
			n := 2 + rng.IntN(3)
			items := make([]core.Item, 0, n)
			for _, bi := range rng.Perm(len(budgets))[:n] { // distinct budgets: no duplicate items
				items = append(items, core.Item{
					Budget: budgets[bi],
					Key:    string(rune('k' + rng.IntN(6))),
					Limit:  limits[bi%len(limits)],
					Cost:   1 + rng.Int64N(3),
				})
			}
			out := make([]core.Outcome, n)
			if err := s.Take(ctx, items, out); err != nil {
				t.Fatal(err)
			}
			for i := range out {
				if !out[i].Charged {
					t.Fatalf("shards %d step %d: item %d not charged: %+v", shards, step, i, out[i])
				}
			}
			charged++
			peek := make([]core.Item, n)
			copy(peek, items)
			for i := range peek {
				peek[i].Cost = 0
			}
			again := make([]core.Outcome, n)
			if err := s.Take(ctx, peek, again); err != nil {
				t.Fatal(err)
			}
			for i := range items {
				if again[i].Remaining != out[i].Remaining {
					t.Fatalf("shards %d step %d: %s/%s remaining %d right after a take that left %d (a charge was lost or doubled)",
						shards, step, items[i].Budget, items[i].Key, again[i].Remaining, out[i].Remaining)
				}
			}
			if max := shards * ((6+shards-1)/shards + 4); s.Len() > max {
				t.Fatalf("shards %d step %d: %d entries, bound %d", shards, step, s.Len(), max)
			}
		}
		if charged == 0 {
			t.Fatal("no take was charged")
		}
	}
}
