package algorithm

import (
	"slices"
	"testing"
)

// entries lists g's entries, oldest first.
func (g *Log) entries() (ts, n []int64) {
	for i := 0; i < g.size; i++ {
		t, k := g.at(i)
		ts, n = append(ts, t), append(n, k)
	}
	return ts, n
}

// Removing an entry from a ring that wraps around keeps the others in
// order; a partial refund keeps the entry.
func TestSlidingLogRemoveWrapped(t *testing.T) {
	g := &Log{}
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
