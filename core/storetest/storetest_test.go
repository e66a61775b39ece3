package storetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, storetest.Config{New: func() (core.Store, error) {
		s, err := memstore.New(memstore.Config{})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	}})
}

// leakyStore forgets to refund: the kit must say so.
type leakyStore struct{ windowStore }

func (*leakyStore) Refund(context.Context, []core.Item, []core.Outcome) error { return nil }

// eagerStore charges every allowed item, even when another item denies.
type eagerStore struct{ *memstore.Store }

func (s eagerStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	for i := range items {
		if err := s.Store.Take(ctx, items[i:i+1], out[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// foreverStore is a toy store whose windows never roll over: it moves a
// key's window on with the clock, count and all. So looks, under the
// kit's clock, a store whose counts are forgotten only when its backend
// expires their key in real time.
type foreverStore struct{ windowStore }

func (s *foreverStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	s.mu.Lock()
	now := s.now()
	for _, st := range s.m {
		st.start = now - now%st.length
	}
	s.mu.Unlock()
	return s.windowStore.Take(ctx, items, out)
}

// fastClock reads 1µs ahead of the kit's clock.
type fastClock struct{ core.Clock }

func (c fastClock) Now() time.Time { return c.Clock.Now().Add(time.Microsecond) }

// TestKitFindsBrokenStores: each check that a broken store breaks fails,
// naming it.
func TestKitFindsBrokenStores(t *testing.T) {
	mem := memstore.MustNew(memstore.Config{})
	t.Cleanup(func() { _ = mem.Close() })
	for _, tc := range []struct {
		name  string
		store core.Store
		open  storetest.OpenAt // for the time checks (storetest.VerifyTime) instead
		algs  []core.Algorithm
		want  []string
	}{
		{"no refunds", &leakyStore{windowStore{m: map[[2]string]*window{}}}, nil, []core.Algorithm{core.FixedWindow}, []string{"Refund:"}},
		{"not all-or-nothing", eagerStore{mem}, nil, nil, []string{"AllOrNothing:"}},
		{"never expires", nil, func(clock core.Clock) (core.Store, error) {
			return &foreverStore{windowStore{m: map[[2]string]*window{}, clock: clock}}, nil
		}, []core.Algorithm{core.FixedWindow}, []string{
			"roll-over, fixed_window q=5 w=1s: step 4, 1s after a boundary, cost 5 (the whole quota is back at the boundary): got denied",
			"expiry, fixed_window q=5 w=1s: a key spent in full (cost 5) 333340µs after a boundary, left alone for a million windows (1000000000001µs), then: cost 1 (as new): got denied, not charged, remaining 0",
		}},
		{"a clock 1µs fast", nil, func(clock core.Clock) (core.Store, error) {
			s, err := memstore.New(memstore.Config{Clock: fastClock{clock}, SweepInterval: -1})
			if err == nil {
				t.Cleanup(func() { _ = s.Close() })
			}
			return s, err
		}, nil, []string{
			"roll-over, fixed_window q=5 w=1s: step 1, 0s after a boundary, cost 5 (a new key's quota): got allowed, charged, remaining 0, reset 999.999ms; want allowed, charged, remaining 0, reset 1s",
			"roll-over, sliding_window q=10 w=1s: step 2, 999.999ms after a boundary, cost 1 (still spent 1µs before the boundary (times in whole ms)): got denied, not charged, remaining 0, reset 1s, retry-after 100ms",
		}},
	} {
		var err error
		if tc.open != nil {
			err = storetest.VerifyTime(context.Background(), tc.open, tc.algs...)
		} else {
			err = storetest.Verify(context.Background(), storetest.Config{New: func() (core.Store, error) { return tc.store, nil }, Algorithms: tc.algs})
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the kit reported %v; want a failure of %s", tc.name, err, w)
			}
		}
	}
}

// TestMemoryStoreBounds: the memory store admits no more than each
// algorithm's documented worst case under adversarial arrivals.
func TestMemoryStoreBounds(t *testing.T) {
	storetest.Bounds(t, func(clock core.Clock) (core.Store, error) {
		s, err := memstore.New(memstore.Config{Clock: clock, SweepInterval: -1})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	})
}

// TestMemoryStoreTime: the memory store rolls windows over, refills
// buckets, forgets idle keys and applies changed quotas exactly as the
// algorithms' definitions say, to the microsecond.
func TestMemoryStoreTime(t *testing.T) {
	storetest.Time(t, func(clock core.Clock) (core.Store, error) {
		s, err := memstore.New(memstore.Config{Clock: clock, SweepInterval: -1})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	})
}

// TestWorstCase: the table of bounds, for the limits the README and the
// docs quote.
func TestWorstCase(t *testing.T) {
	for _, c := range []struct {
		l    core.Limit
		span time.Duration
		want int64
	}{
		{core.Limit{Algorithm: core.FixedWindow, Quota: 100, Window: time.Minute}, time.Minute, 200},
		{core.Limit{Algorithm: core.SlidingWindow, Quota: 100, Window: time.Minute}, time.Minute, 199},
		{core.Limit{Algorithm: core.SlidingWindow, Quota: 50, Window: 10 * time.Millisecond}, 10 * time.Millisecond, 95},
		{core.Limit{Algorithm: core.SlidingLog, Quota: 100, Window: time.Minute}, time.Minute, 100},
		{core.Limit{Algorithm: core.TokenBucket, Quota: 100, Window: time.Minute, Burst: 100}, time.Minute, 199},
		{core.Limit{Algorithm: core.FixedWindow, Quota: 100, Window: time.Minute}, 90 * time.Second, 300},
	} {
		if got := storetest.WorstCase(c.l, c.span); got != c.want {
			t.Errorf("WorstCase(%v q=%d w=%v, %v) = %d, want %d", c.l.Algorithm, c.l.Quota, c.l.Window, c.span, got, c.want)
		}
	}
}
