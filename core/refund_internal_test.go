package core

import (
	"context"
	"slices"
	"testing"
	"time"
)

// usClock is a Clock set by hand, in Unix microseconds.
type usClock struct{ us int64 }

func (c *usClock) Now() time.Time { return time.UnixMicro(c.us) }

// entries lists g's entries, oldest first.
func (g *slidingLog) entries() (ts, n []int64) {
	for i := 0; i < g.size; i++ {
		t, k := g.at(i)
		ts, n = append(ts, t), append(n, k)
	}
	return ts, n
}

func logOf(t *testing.T, s *MemoryStore, key string) *slidingLog {
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
	s := MustMemoryStore(MemoryConfig{Clock: c, SweepInterval: -1})
	ctx := context.Background()
	l := Limit{Algorithm: SlidingLog, Quota: 3, Window: time.Hour}
	it := []Item{{Budget: "b", Key: "k", Limit: l, Cost: 1}}
	var o [1]Outcome
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
	ts, n := g.entries()
	if !slices.Equal(ts, []int64{start}) || !slices.Equal(n, []int64{1}) || g.sum != 1 || len(g.ts) > 4 {
		t.Fatalf("log after 100000 refunded cycles: ts %v n %v sum %d ring %d", ts, n, g.sum, len(g.ts))
	}
}

// Removing an entry from a ring that wraps around keeps the others in
// order; a partial refund keeps the entry.
func TestSlidingLogRemoveWrapped(t *testing.T) {
	g := &slidingLog{}
	for ts := int64(1); ts <= 4; ts++ {
		g.push(ts*10, ts)
	}
	g.prune(35, 10) // drops 10 and 20: head is 2 of a ring of 4
	g.push(50, 5)
	g.push(60, 6) // wraps: physical order 50 60 30 40
	if g.head == 0 || len(g.ts) != 4 {
		t.Fatalf("ring does not wrap: head %d len %d", g.head, len(g.ts))
	}
	g.remove(40, 4) // the entry before the wrap point
	ts, n := g.entries()
	if !slices.Equal(ts, []int64{30, 50, 60}) || !slices.Equal(n, []int64{3, 5, 6}) || g.sum != 14 {
		t.Fatalf("after removing 40: ts %v n %v sum %d", ts, n, g.sum)
	}
	g.remove(50, 2) // partial: stays
	g.remove(55, 1) // no such entry
	g.remove(30, 9) // more than it holds: removed, sum drops by 3 only
	ts, n = g.entries()
	if !slices.Equal(ts, []int64{50, 60}) || !slices.Equal(n, []int64{3, 6}) || g.sum != 9 {
		t.Fatalf("after partial and oldest removal: ts %v n %v sum %d", ts, n, g.sum)
	}
	g.remove(60, 6)
	g.remove(50, 3)
	if g.size != 0 || g.sum != 0 {
		t.Fatalf("emptied log: size %d sum %d", g.size, g.sum)
	}
	g.push(70, 1)
	if ts, _ := g.entries(); !slices.Equal(ts, []int64{70}) {
		t.Fatalf("push after emptying: %v", ts)
	}
}
