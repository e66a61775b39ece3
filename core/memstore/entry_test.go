package memstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/algorithm"
)

// FuzzPackState: a algorithm.State that packs unpacks to itself, and states that
// cannot be held in a word are refused.
func FuzzPackState(f *testing.F) {
	f.Add(int(core.FixedWindow), int64(time.Minute), int64(1_750_000_020_000_000), int64(5))
	f.Add(int(core.FixedWindow), int64(time.Second), int64(4_294_967_295_000_000), int64(1<<31-1))
	f.Add(int(core.FixedWindow), int64(time.Second), int64(4_294_967_296_000_000), int64(0))
	f.Add(int(core.FixedWindow), int64(100*time.Millisecond), int64(1_750_000_000_000_000), int64(1))
	f.Add(int(core.FixedWindow), int64(time.Second), int64(1_750_000_000_500_000), int64(1))
	f.Add(int(core.TokenBucket), int64(time.Hour), int64(1<<62-1), int64(0))
	f.Add(int(core.LeakyBucket), int64(time.Hour), int64(-1), int64(0))
	f.Add(int(core.SlidingWindow), int64(time.Minute), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, alg int, window, a, b int64) {
		l := core.Limit{Algorithm: core.Algorithm(alg), Quota: 1, Window: time.Duration(window)}
		if l.Window < time.Millisecond || l.Window%time.Millisecond != 0 || l.Window.Microseconds() > 1<<50 {
			return
		}
		st := algorithm.State{A: a, B: b}
		if l.Algorithm != core.FixedWindow {
			st.B = 0
		}
		word, ok := packState(&st, &l)
		if !ok {
			switch l.Algorithm {
			case core.TokenBucket, core.LeakyBucket:
				if a >= 0 && a < 1<<62 {
					t.Fatalf("TAT %d refused", a)
				}
			case core.FixedWindow:
				w := l.Window.Microseconds()
				if a >= 0 && a%w == 0 && a/w < 1<<32 && b >= 0 && b < 1<<31 {
					t.Fatalf("window at %d with %d refused", a, b)
				}
			}
			return
		}
		if l.Algorithm != core.FixedWindow && l.Algorithm != core.TokenBucket && l.Algorithm != core.LeakyBucket {
			t.Fatalf("%v packed", l.Algorithm)
		}
		if word&wLocked != 0 {
			t.Fatalf("packed word %#x has the lock bit", word)
		}
		if got := unpackState(word, &l); got != st {
			t.Fatalf("%+v packs to %#x, which unpacks to %+v", st, word, got)
		}
	})
}

// Takes on one key from many goroutines charge exactly what the algorithm.State
// holds, whether the algorithm.State is packed in a word and charged without a lock,
// held unpacked, or moves from one to the other while takes run (a fixed
// window whose count passes 2^31), with multi-item takes and refunds
// mixed in.
func TestMemoryStoreExactAcrossRepresentations(t *testing.T) {
	const workers, tries, allowed = 4, 1000, 3000
	big := int64(1) << 21 // 3000 charges of 2^21 pass 2^31 after 1024
	for _, c := range []struct {
		name   string
		l      core.Limit
		cost   int64
		packed bool // at the end
	}{
		{"fixed window, packed", core.Limit{Quota: allowed, Window: time.Hour}, 1, true},
		{"fixed window, unpacked on the way", core.Limit{Quota: allowed * big, Window: time.Hour}, big, false},
		{"fixed window of 100ms, never packed", core.Limit{Quota: allowed, Window: 100 * time.Millisecond}, 1, false},
		{"token bucket", core.Limit{Algorithm: core.TokenBucket, Quota: allowed, Burst: allowed, Window: time.Hour}, 1, true},
		{"sliding window", core.Limit{Algorithm: core.SlidingWindow, Quota: allowed, Window: time.Hour}, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A clock that stands still: no window ends and no bucket
			// refills while the takes run.
			clock := &usClock{us: 1_750_000_000_000_000}
			s := MustNew(Config{Clock: clock, Shards: 1, SweepInterval: -1})
			ctx := context.Background()
			hot := core.Item{Budget: "hot", Key: "k", Limit: c.l, Cost: c.cost}
			var kept, refunds atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < tries; i++ {
						items := []core.Item{hot}
						if i%5 == w { // a multi-item take
							items = append(items, core.Item{Budget: "other", Key: strconv.Itoa(w*tries + i), Limit: core.Limit{Quota: 1, Window: time.Hour}, Cost: 1})
						}
						out := make([]core.Outcome, len(items))
						if err := s.Take(ctx, items, out); err != nil {
							t.Error(err)
							return
						}
						if !out[0].Charged {
							continue
						}
						if i%7 == 3 { // give it back
							if err := s.Refund(ctx, items, out); err != nil {
								t.Error(err)
								return
							}
							refunds.Add(1)
							continue
						}
						kept.Add(1)
					}
				}()
			}
			wg.Wait()
			var o [1]core.Outcome
			s.peek([]core.Item{hot}, o[:])
			if got, want := o[0].Remaining, c.l.Capacity()-kept.Load()*c.cost; got != want {
				t.Fatalf("%d kept, %d refunded: the store has %d left, want %d", kept.Load(), refunds.Load(), got, want)
			}
			if k := kept.Load(); k > allowed || k < allowed-workers {
				t.Fatalf("%d kept of %d", k, allowed)
			}
			if packed := s.entryOf("hot", "k").lim.Load()&limPacked != 0; packed != c.packed {
				t.Fatalf("algorithm.State packed at the end: %v, want %v", packed, c.packed)
			}
		})
	}
}

// Two keys sharing a shard, taken in short runs from many goroutines, keep
// taking each other's place as the shard's hot entry and the store's top
// one; each is charged exactly its quota.
func TestMemoryStoreHotEntriesChangingPlaces(t *testing.T) {
	clock := &usClock{us: 1_750_000_000_000_000}
	s := MustNew(Config{Clock: clock, Shards: 1, SweepInterval: -1})
	ctx := context.Background()
	const quota, workers, tries = 2000, 4, 1500
	l := core.Limit{Quota: quota, Window: time.Hour}
	var charged [2]atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o [1]core.Outcome
			for i := 0; i < tries; i++ {
				k := (i / (2 + w%2)) % 2 // runs of 2 or 3 takes on one key
				if err := s.Take(ctx, []core.Item{{Budget: "b", Key: "key" + strconv.Itoa(k), Limit: l, Cost: 1}}, o[:]); err != nil {
					t.Error(err)
					return
				}
				if o[0].Charged {
					charged[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k := range charged {
		if n := charged[k].Load(); n != quota {
			t.Errorf("key%d: %d charged against a quota of %d", k, n, quota)
		}
	}
}
