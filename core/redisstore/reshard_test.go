package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
)

// TestReshardInTheWrongOrder: a slot handed over in an order other than
// the one Redis documents leaves two masters sending a key's commands to
// each other (MOVED and MOVED, or ASK and MOVED) until the operator
// finishes. Through a cluster client this is a resharding under way, not
// a misconfiguration: a call that runs out of redirects is retried within
// the store's deadline, succeeds once the operator finishes within it,
// and otherwise fails as a plain store error or a timeout (never
// core.ErrMisconfigured, whose docs say no retry fixes it). A call over
// two slots that fails as a store error leaves no charge on the other
// slot; one that times out may (a timed-out call's charges may stand).
func TestReshardInTheWrongOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cl.Addrs())
	ctx := context.Background()
	ids := map[string]string{} // node address → node ID
	for _, n := range cl.Nodes {
		ids[n.Addr()] = n.CLI("CLUSTER", "MYID")
	}
	owner := func(slot int) *redistest.Server {
		t.Helper()
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End {
				for _, n := range cl.Nodes {
					if n.Addr() == s.Nodes[0].Addr {
						return n
					}
				}
			}
		}
		t.Fatalf("slot %d has no owner among the masters", slot)
		return nil
	}
	l := fixed(100, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	for i, c := range []struct {
		name   string
		break_ func(src, dst *redistest.Server, slot string) // leaves the slot's commands bouncing
		finish func(src, dst *redistest.Server, slot string) // what the operator does next
	}{
		{
			name: "node on the source first",
			break_: func(src, dst *redistest.Server, slot string) {
				src.CLI("CLUSTER", "SETSLOT", slot, "NODE", ids[dst.Addr()])
			},
			finish: func(src, dst *redistest.Server, slot string) {
				dst.CLI("CLUSTER", "SETSLOT", slot, "NODE", ids[dst.Addr()])
			},
		},
		{
			name: "migrating before importing",
			break_: func(src, dst *redistest.Server, slot string) {
				src.CLI("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst.Addr()])
			},
			finish: func(src, dst *redistest.Server, slot string) {
				dst.CLI("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src.Addr()])
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A partition of its own, in a slot no key uses yet (SETSLOT
			// NODE refuses a slot whose keys the node still holds).
			partition := fmt.Sprintf("reshard%d", i)
			slot := slotOf(partition)
			src := owner(slot)
			dst := cl.Nodes[0]
			if dst == src {
				dst = cl.Nodes[1]
			}
			c.break_(src, dst, fmt.Sprint(slot))

			// A partition on a slot of another master, which stays put.
			healthy := ""
			for j := 0; healthy == ""; j++ {
				if p := fmt.Sprintf("healthy%d", j); owner(slotOf(p)) != src {
					healthy = p
				}
			}

			quick := mustStore(t, cc, Config{Prefix: fmt.Sprintf("q%d:", i), Timeout: 200 * time.Millisecond})
			out := make([]core.Outcome, 2)
			if err := quick.Take(ctx, []core.Item{item("a", healthy, l, 1, false)}, out); err != nil || out[0].Remaining != 99 {
				t.Fatalf("healthy partition: err %v, remaining %d, want 99", err, out[0].Remaining)
			}
			for _, items := range [][]core.Item{
				{item("a", partition, l, 1, false)},                                  // one script run
				{item("a", partition, l, 1, false), item("a", healthy, l, 1, false)}, // two, pipelined
			} {
				err := quick.Take(ctx, items, out)
				if err == nil {
					t.Fatalf("Take of %d items succeeded while the slot's masters send it to each other", len(items))
				}
				// Retried until the deadline: a store error naming the
				// redirects, or a timeout when the deadline passed during a
				// run; never a misconfiguration.
				switch kind := core.ClassifyStoreError(err); {
				case errors.Is(err, core.ErrMisconfigured) || kind != core.KindStoreError && kind != core.KindStoreTimeout:
					t.Errorf("%d items: err = %v (kind %v), want a store error or timeout: a resharding is not a misconfiguration", len(items), err, kind)
				case kind == core.KindStoreError:
					if msg := err.Error(); !strings.Contains(msg, "hash slot is being handed over") ||
						!strings.Contains(msg, "MOVED") && !strings.Contains(msg, "ASK") {
						t.Errorf("%d items: err = %v, want it to say a slot is being handed over and name Redis's last reply", len(items), err)
					}
					// Failed as a store error (not a timeout, whose charges
					// may stand), the call charged nothing that stayed: the
					// healthy partition's charge was given back.
					if len(items) == 2 {
						peek := make([]core.Outcome, 1)
						if err := quick.Peek(ctx, []core.Item{item("a", healthy, l, 1, false)}, peek); err != nil || peek[0].Remaining != 99 {
							t.Errorf("healthy partition after the failed call: err %v, remaining %d, want 99 (its charge given back)", err, peek[0].Remaining)
						}
					}
				}
			}

			// The operator finishes while a call with time left is retrying.
			patient := mustStore(t, cc, Config{Prefix: fmt.Sprintf("p%d:", i), Timeout: 5 * time.Second})
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				done <- patient.Take(ctx, []core.Item{item("a", partition, l, 1, false), item("a", healthy, l, 1, false)}, out)
			}()
			time.Sleep(300 * time.Millisecond)
			c.finish(src, dst, fmt.Sprint(slot))
			if err := <-done; err != nil {
				t.Fatalf("Take failed %v after it started although the operator finished after 300ms: %v", time.Since(start), err)
			}
			for k := range 2 {
				if !out[k].Allowed || out[k].Remaining != 99 {
					t.Errorf("outcome %d: %+v, want allowed with 99 remaining", k, out[k])
				}
			}
		})
	}
}

// TestReshardMidwayRetriesTryAgain: a slot handed over in Redis's
// documented order (the target IMPORTING, the source MIGRATING, then
// MIGRATE of its keys one by one) holds, midway, some keys of a partition
// on each master. A call that needs both, here a sliding log's record and
// its entries, gets TRYAGAIN from Redis; the store runs it again within
// its deadline (the script did not run), and it succeeds, counted
// exactly, once the operator moved the rest. A call whose deadline ends
// first fails as a plain store error naming TRYAGAIN.
func TestReshardMidwayRetriesTryAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cl.Addrs())
	ctx := context.Background()
	const partition = "midway"
	slot := slotOf(partition)
	var src, dst *redistest.Server
	for _, n := range cl.Nodes {
		if ownsSlot(t, n, slot) {
			src = n
		}
	}
	if src == nil {
		t.Fatalf("no master owns slot %d", slot)
	}
	for _, n := range cl.Nodes {
		if n != src {
			dst = n
			break
		}
	}
	l := slidingLog(10, time.Hour)
	patient := mustStore(t, cc, Config{Prefix: "mid:", Timeout: 5 * time.Second})
	out := make([]core.Outcome, 1)
	if err := patient.Take(ctx, []core.Item{item("log", partition, l, 1, false)}, out); err != nil || out[0].Remaining != 9 {
		t.Fatalf("first take: err %v, remaining %d, want 9", err, out[0].Remaining)
	}
	recordKey, logKey := patient.Key(partition), patient.LogKey("log", partition)
	s := fmt.Sprint(slot)
	dst.CLI("CLUSTER", "SETSLOT", s, "IMPORTING", src.CLI("CLUSTER", "MYID"))
	src.CLI("CLUSTER", "SETSLOT", s, "MIGRATING", dst.CLI("CLUSTER", "MYID"))
	migrate := func(key string) {
		t.Helper()
		if got := src.CLI("MIGRATE", "127.0.0.1", fmt.Sprint(dst.Port()), "", "0", "5000", "KEYS", key); got != "OK" {
			t.Fatalf("MIGRATE %s: %q", key, got)
		}
	}
	migrate(logKey) // the record stays on the source

	quick := mustStore(t, cc, Config{Prefix: "mid:", Timeout: 150 * time.Millisecond})
	err := quick.Take(ctx, []core.Item{item("log", partition, l, 1, false)}, out)
	if err == nil {
		t.Fatal("a take succeeded with the log's record and entries on two masters")
	}
	if kind := core.ClassifyStoreError(err); kind != core.KindStoreError && kind != core.KindStoreTimeout || errors.Is(err, core.ErrMisconfigured) {
		t.Errorf("midway: err = %v (kind %v), want a store error or timeout", err, kind)
	} else if kind == core.KindStoreError && !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Errorf("midway: err = %v, want it to name Redis's TRYAGAIN", err)
	}

	done := make(chan error, 1)
	go func() { done <- patient.Take(ctx, []core.Item{item("log", partition, l, 1, false)}, out) }()
	time.Sleep(300 * time.Millisecond)
	migrate(recordKey)
	for _, n := range cl.Nodes {
		n.CLI("CLUSTER", "SETSLOT", s, "NODE", dst.CLI("CLUSTER", "MYID"))
	}
	if err := <-done; err != nil {
		t.Fatalf("the take retrying through the hand-over failed: %v", err)
	}
	if !out[0].Allowed || out[0].Remaining != 8 {
		t.Errorf("after the hand-over: %+v, want allowed with 8 remaining (one charge before, one now; none twice)", out[0])
	}
}

// ownsSlot reports whether node n serves slot as a master.
func ownsSlot(t *testing.T, n *redistest.Server, slot int) bool {
	t.Helper()
	for _, line := range strings.Split(n.CLI("CLUSTER", "NODES"), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			var a, b int
			if _, err := fmt.Sscan(lo, &a); err != nil {
				continue
			}
			if _, err := fmt.Sscan(hi, &b); err != nil {
				continue
			}
			if slot >= a && slot <= b {
				return true
			}
		}
	}
	return false
}
