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
