package memstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/algorithm"
)

// usClock is a Clock set by hand, in Unix microseconds.
type usClock struct{ us int64 }

func (c *usClock) Now() time.Time { return time.UnixMicro(c.us) }

// entries lists g's entries, oldest first.
func entries(g *algorithm.Log) (ts, n []int64) {
	for i := 0; i < g.Len(); i++ {
		t, k := g.At(i)
		ts, n = append(ts, t), append(n, k)
	}
	return ts, n
}

func logOf(t *testing.T, s *Store, key string) *algorithm.Log {
	t.Helper()
	e := s.entryOf("b", key)
	if e == nil || e.log == nil {
		t.Fatalf("no log for %q", key)
	}
	return e.log
}

// Many charge-and-refund cycles on one sliding log key leave its ring as
// small as the charges that were kept.
func TestSlidingLogRingStaysBounded(t *testing.T) {
	const start = 1_750_000_000_000_000
	c := &usClock{us: start}
	s := MustNew(Config{Clock: c, SweepInterval: -1})
	ctx := context.Background()
	l := core.Limit{Algorithm: core.SlidingLog, Quota: 3, Window: time.Hour}
	it := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 1}}
	var o [1]core.Outcome
	if err := s.Take(ctx, it, o[:]); err != nil || !o[0].Charged {
		t.Fatalf("kept charge: %+v %v", o[0], err)
	}
	for i := 0; i < 100_000; i++ {
		c.us++
		if err := s.Take(ctx, it, o[:]); err != nil || !o[0].Charged {
			t.Fatalf("cycle %d: %+v %v", i, o[0], err)
		}
		if err := s.Refund(ctx, it, o[:]); err != nil {
			t.Fatal(err)
		}
	}
	g := logOf(t, s, "k")
	ts, n := entries(g)
	if !slices.Equal(ts, []int64{start}) || !slices.Equal(n, []int64{1}) || g.Sum() != 1 || g.Cap() > 4 {
		t.Fatalf("log after 100000 refunded cycles: ts %v n %v sum %d ring %d", ts, n, g.Sum(), g.Cap())
	}
}
