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

// TestKitFindsBrokenStores: each check that a broken store breaks fails,
// naming it.
func TestKitFindsBrokenStores(t *testing.T) {
	mem := memstore.MustNew(memstore.Config{})
	t.Cleanup(func() { _ = mem.Close() })
	for _, tc := range []struct {
		name  string
		store core.Store
		algs  []core.Algorithm
		want  []string
	}{
		{"no refunds", &leakyStore{windowStore{m: map[[2]string]*window{}}}, []core.Algorithm{core.FixedWindow}, []string{"Refund:"}},
		{"not all-or-nothing", eagerStore{mem}, nil, []string{"AllOrNothing:"}},
	} {
		err := storetest.Verify(context.Background(), storetest.Config{New: func() (core.Store, error) { return tc.store, nil }, Algorithms: tc.algs})
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
