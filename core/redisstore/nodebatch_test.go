package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/redis/go-redis/v9"
)

// pipeCounter records the pipelines of FCALLs a client sends: how many
// each held, and the errors they got.
type pipeCounter struct {
	mu     sync.Mutex
	fcalls []int
	errs   []string
}

func (h *pipeCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		n := 0
		var errs []string
		for _, c := range cmds {
			if !strings.EqualFold(c.Name(), "fcall") {
				continue // a connection's set-up
			}
			n++
			if c.Err() != nil {
				errs = append(errs, c.Err().Error())
			}
		}
		if n == 0 {
			return err
		}
		h.mu.Lock()
		h.fcalls = append(h.fcalls, n)
		h.errs = append(h.errs, errs...)
		h.mu.Unlock()
		return err
	}
}

// partitionsOf returns n partitions ("<name>-<i>") in distinct hash slots
// that node holds, skipping slots in avoid.
func partitionsOf(t *testing.T, cc *redis.ClusterClient, node *redis.Client, name string, n int, avoid map[int]bool) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		p := fmt.Sprintf("%s-%d", name, i)
		m, err := cc.MasterForKey(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if m == node && !avoid[slotOf(p)] {
			avoid[slotOf(p)] = true
			out = append(out, p)
		}
	}
	return out
}

// giveSlot tells every node of cl that slot now belongs to dst, behind
// the cluster client's back: its slot map still names the old master.
func giveSlot(cl *redistest.Cluster, slot int, dst *redistest.Server) {
	id := strings.TrimSpace(dst.CLI("CLUSTER", "MYID"))
	for _, n := range cl.Nodes {
		n.CLI("CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", id)
	}
}

// pendingOf builds the pending of a Take of items, as takeBatched does.
func pendingOf(s *Store, items []core.Item) *pending {
	p := getPending(len(items))
	p.slot = slotOf(partitionTag(items[0].Key))
	p.keys, p.blob = s.appendItems(p.keys, p.blob, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
		return appendTakeItem(b, &items[i], name, k, lk)
	})
	return p
}

// On a cluster, the Takes one master holds in several hash slots go out
// in one round trip, one script run per slot, and each is decided
// exactly: 32 goroutines spend 8 partitions of one master, 80 Takes each,
// under a quota of 50, and exactly 50 of each partition's pass.
func TestNodeBatchAcrossSlots(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cl.Addrs())
	st := mustStore(t, cc, Config{Prefix: "nb:"})
	ctx := context.Background()
	if err := st.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	node, err := cc.MasterForKey(ctx, "anchor")
	if err != nil {
		t.Fatal(err)
	}
	h := &pipeCounter{}
	node.AddHook(h)
	parts := partitionsOf(t, cc, node, "p", 8, map[int]bool{})
	const quota, per = 50, 80
	l := fixed(quota, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	allowed := make([]atomic.Int64, len(parts))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]core.Outcome, 1)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(parts)*per) {
					return
				}
				k := int(i) % len(parts)
				if err := st.Take(ctx, []core.Item{item("a", parts[k], l, 1, false)}, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k := range parts {
		if got := allowed[k].Load(); got != quota {
			t.Errorf("partition %s: %d of %d allowed, want exactly %d", parts[k], got, per, quota)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	most, runs := 0, 0
	for _, n := range h.fcalls {
		most = max(most, n)
		runs += n
	}
	if most < 2 {
		t.Errorf("no pipeline held more than %d script runs (%d pipelines, %d runs)", most, len(h.fcalls), runs)
	}
	t.Logf("%d pipelined script runs in %d round trips, at most %d in one", runs, len(h.fcalls), most)
	if len(h.errs) > 0 {
		t.Errorf("pipelined runs failed: %v", h.errs)
	}
}

// A run of a node batch whose slot has moved to another master is
// answered MOVED; it runs again the lone way, which follows the cluster,
// and its decision is made once, on the new master, while the other
// slots' runs of the same round trip are not run again. With functions
// off (EVALSHA) every slot's run goes the lone way.
func TestNodeBatchRedirected(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cl.Addrs())
	ctx := context.Background()
	server := func(c *redis.Client) *redistest.Server {
		for _, n := range cl.Nodes {
			if n.Addr() == c.Options().Addr {
				return n
			}
		}
		t.Fatalf("no master at %s", c.Options().Addr)
		return nil
	}
	l := fixed(10, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	avoid := map[int]bool{}
	for round, functions := range []bool{true, false} {
		st := mustStore(t, cc, Config{Prefix: fmt.Sprintf("nr%d:", round)})
		if err := st.Preload(ctx); err != nil {
			t.Fatal(err)
		}
		node, err := cc.MasterForKey(ctx, fmt.Sprintf("anchor%d", round))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := st.nodeBatcher([]core.Item{item("a", fmt.Sprintf("anchor%d", round), l, 1, false)})
		if b == nil || b.node != node {
			t.Fatalf("no node batcher for %s", node.Options().Addr)
		}
		h := &pipeCounter{}
		node.AddHook(h)
		parts := partitionsOf(t, cc, node, fmt.Sprintf("r%d", round), 3, avoid)
		// Move the first partition's slot (no key in it yet) to another
		// master, behind the client's back: its slot map still says node.
		src := server(node)
		dst := cl.Nodes[0]
		if dst == src {
			dst = cl.Nodes[1]
		}
		giveSlot(cl, slotOf(parts[0]), dst)
		st.noFunctions.Store(!functions)
		var batch []*pending
		for _, p := range parts {
			batch = append(batch, pendingOf(st, []core.Item{item("a", p, l, 1, false)}))
		}
		pend := append([]*pending(nil), batch...)
		if !st.runNodeBatch(ctx, b, batch) {
			t.Fatalf("functions %v: the run did not answer", functions)
		}
		for i, p := range pend {
			if p.err != nil || !p.out[0].Allowed || p.out[0].Remaining != 9 {
				t.Errorf("functions %v: partition %s: err %v, outcome %+v, want allowed with 9 remaining", functions, parts[i], p.err, p.out[0])
			}
			putPending(p)
		}
		// Each partition was charged once, the moved one on dst.
		peek := make([]core.Outcome, 1)
		for _, p := range parts {
			if err := st.Peek(ctx, []core.Item{item("a", p, l, 1, false)}, peek); err != nil || peek[0].Remaining != 9 {
				t.Errorf("functions %v: partition %s after the run: err %v, remaining %d, want 9", functions, p, err, peek[0].Remaining)
			}
		}
		h.mu.Lock()
		moved := strings.Contains(strings.Join(h.errs, " "), "MOVED")
		pipes := len(h.fcalls)
		h.mu.Unlock()
		if functions && (!moved || pipes == 0) {
			t.Errorf("the pipelined round trip (%d seen) got no MOVED for the moved slot: %v", pipes, h.errs)
		}
		if !functions && pipes != 0 {
			t.Errorf("with functions off, %d pipelines went to the master, want none", pipes)
		}
	}
}

// fcallCounter records the FCALLs processed one at a time by the client
// it hooks, and their errors.
type fcallCounter struct {
	mu    sync.Mutex
	calls int
	errs  []string
}

func (h *fcallCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *fcallCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.EqualFold(cmd.Name(), "fcall") {
			h.mu.Lock()
			h.calls++
			if err != nil { // what the server answered (cmd.Err may be cleared by then)
				h.errs = append(h.errs, err.Error())
			}
			h.mu.Unlock()
		}
		return err
	}
}
func (h *fcallCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *fcallCounter) get() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls, append([]string(nil), h.errs...)
}

// A lone run of a master's batcher goes to that master directly, not
// through the cluster client (whose slot look-up and retry loop cost
// about four allocations a decision); should its slot have moved, the
// master answers MOVED and the run goes again through the cluster client,
// which follows it: the decision is made once, on the new master.
func TestLoneRunGoesToItsMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cl.Addrs())
	ctx := context.Background()
	l := fixed(10, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	st := mustStore(t, cc, Config{Prefix: "lone:"})
	if err := st.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	node, err := cc.MasterForKey(ctx, "anchor")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := st.nodeBatcher([]core.Item{item("a", "anchor", l, 1, false)})
	if b == nil || b.node != node {
		t.Fatalf("no node batcher for %s", node.Options().Addr)
	}
	parts := partitionsOf(t, cc, node, "lone", 2, map[int]bool{})
	viaCluster, viaNode := &fcallCounter{}, &fcallCounter{}
	cc.AddHook(viaCluster)
	node.AddHook(viaNode)
	lone := func(part string) {
		t.Helper()
		p := pendingOf(st, []core.Item{item("a", part, l, 1, false)})
		defer putPending(p)
		if !st.runBatch(ctx, b, []*pending{p}, nil) || p.err != nil {
			t.Fatalf("partition %s: the run did not answer: %v", part, p.err)
		}
		if !p.out[0].Allowed || p.out[0].Remaining != 9 {
			t.Errorf("partition %s: outcome %+v, want allowed with 9 remaining", part, p.out[0])
		}
	}

	lone(parts[0])
	if n, _ := viaCluster.get(); n != 0 {
		t.Errorf("a lone run of the master's batcher went through the cluster client (%d FCALLs), want straight to the master", n)
	}
	if n, errs := viaNode.get(); n != 1 || len(errs) != 0 {
		t.Errorf("the master processed %d FCALLs (errors %v), want 1 without error", n, errs)
	}

	// Move the second partition's slot (no key in it yet) to another
	// master, behind the client's back: its slot map still says node.
	dst := cl.Nodes[0]
	if dst.Addr() == node.Options().Addr {
		dst = cl.Nodes[1]
	}
	giveSlot(cl, slotOf(parts[1]), dst)
	lone(parts[1])
	if _, errs := viaNode.get(); !strings.Contains(strings.Join(errs, " "), "MOVED") {
		t.Errorf("the old master answered %v, want MOVED for the moved slot", errs)
	}
	if n, _ := viaCluster.get(); n == 0 {
		t.Error("the redirected run did not go again through the cluster client")
	}
	peek := make([]core.Outcome, 1)
	for _, p := range parts {
		if err := st.Peek(ctx, []core.Item{item("a", p, l, 1, false)}, peek); err != nil || peek[0].Remaining != 9 {
			t.Errorf("partition %s after its run: err %v, remaining %d, want 9 (charged once)", p, err, peek[0].Remaining)
		}
	}
}
