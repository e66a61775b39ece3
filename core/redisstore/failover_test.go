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
	"github.com/redis/go-redis/v9"
)

// Bounds of TestClusterMasterLoss, counted from the moment the cluster
// reports the dead master's replica promoted.
const (
	// lossRecovery: the dead master's keys are decided again within this
	// of the promotion (the slot map is re-read within reloadEvery of a
	// failed call, and the reload takes one CLUSTER SLOTS), with slack for
	// a loaded machine under -race.
	lossRecovery = 3 * time.Second
	// lossHealthySlack: the other masters' keys fail only while the
	// cluster itself refuses them (CLUSTERDOWN from when the master is
	// marked failed until its replica takes over), plus this.
	lossHealthySlack = 500 * time.Millisecond
)

// tally records the outcomes of one store's calls on one class of keys.
type tally struct {
	mu                      sync.Mutex
	ok, failed              int
	lastOK, firstErr, last  time.Time // last: the last error
	maxGap                  time.Duration
	maxGapFrom, maxGapUntil time.Time
	sample                  error
}

func (c *tally) record(err error, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failed++
		if c.firstErr.IsZero() {
			c.firstErr, c.sample = at, err
		}
		c.last = at
		return
	}
	c.ok++
	c.gap(at)
	c.lastOK = at
}

// gap notes the time since the last success, at a success or the end.
func (c *tally) gap(at time.Time) {
	if !c.lastOK.IsZero() && at.Sub(c.lastOK) > c.maxGap {
		c.maxGap, c.maxGapFrom, c.maxGapUntil = at.Sub(c.lastOK), c.lastOK, at
	}
}

// TestClusterMasterLoss kills one master of a cluster whose masters each
// have a replica, while decisions flow on keys of every master, through
// two stores: one opened by Open with the nodes' addresses (as users do),
// one on a cluster client built with go-redis's default options (whose
// slot map is re-read every 60 s, and on MOVED or ASK, never on a
// connection error). The dead master's keys must be decided again within
// lossRecovery of the replica's promotion, by both stores; the other
// masters' keys fail only while the cluster refuses them (CLUSTERDOWN,
// between the master being marked failed and the promotion); and the
// slot map is re-read a bounded number of times, not once per failed
// call.
func TestClusterMasterLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and fails a master over")
	}
	cl := redistest.StartClusterWithReplicas(t, 3, 1, time.Second)
	const timeout = 500 * time.Millisecond // a loaded machine's healthy calls fit in it
	opened, oc, err := Open(strings.Join(cl.Addrs(), ","), Config{Prefix: "loss:", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	dc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer dc.Close()
	stores := []struct {
		name string
		st   *Store
	}{
		{"Open", opened},
		{"NewClusterClient defaults", mustStore(t, dc, Config{Prefix: "loss:", Timeout: timeout})},
	}

	// The keys, by whether the master to kill holds their slot.
	ctx := context.Background()
	victim := cl.Nodes[0]
	doomed, healthy := keysByMaster(t, dc, "loss:", victim.Addr(), 64)

	// Two goroutines per store and class of keys, each cycling over its
	// keys: a class's calls never wait behind the other's.
	tallies := make([][2]*tally, len(stores))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for s := range stores {
		for class, keys := range [2][]string{doomed, healthy} {
			tl := &tally{}
			tallies[s][class] = tl
			for w := 0; w < 2; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]core.Outcome, 1)
					for i := w; !stop.Load(); i += 2 {
						err := stores[s].st.Take(ctx, []core.Item{item("api", keys[i%len(keys)], fixed(1<<40, time.Hour), 1, false)}, out)
						tl.record(err, time.Now())
					}
				}()
			}
		}
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	time.Sleep(500 * time.Millisecond)
	for s := range tallies {
		for class, tl := range tallies[s] {
			tl.mu.Lock()
			if tl.failed > 0 || tl.ok == 0 {
				t.Fatalf("%s, class %d, before the kill: %d ok, %d failed (%v)", stores[s].name, class, tl.ok, tl.failed, tl.sample)
			}
			tl.mu.Unlock()
		}
	}
	survivors := []*redis.Client{newClient(t, cl.Nodes[1].Addr()), newClient(t, cl.Nodes[2].Addr()), newClient(t, cl.Replicas[0][0].Addr())}
	reloads := func() int64 {
		var n int64
		for _, c := range survivors {
			n += commandCalls(t, c, "cluster|slots")
		}
		return n
	}
	reloadsBefore := reloads()

	killed := time.Now()
	victim.Kill()
	cl.WaitFailover(0, 30*time.Second)
	promoted := time.Now()
	// Watch until the dead master's keys have been decided without error
	// for a second by both stores, or until past the bound.
	end := promoted.Add(lossRecovery + time.Second)
	for time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
		settled := true
		for s := range tallies {
			tl := tallies[s][0]
			tl.mu.Lock()
			settled = settled && tl.lastOK.After(promoted) && time.Since(tl.last) > time.Second
			tl.mu.Unlock()
		}
		if settled {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	ended := time.Now()
	observed := ended.Sub(killed)
	reloadCount := reloads() - reloadsBefore

	rel := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%+.2fs", at.Sub(promoted).Seconds())
	}
	t.Logf("replica promoted %.2fs after the kill; times below are relative to the promotion", promoted.Sub(killed).Seconds())
	var failed int
	for s := range stores {
		d, h := tallies[s][0], tallies[s][1]
		d.gap(ended)
		h.gap(ended)
		failed += d.failed + h.failed
		t.Logf("%s: dead master's keys: %d ok, %d failed, from %s until %s (%v)", stores[s].name, d.ok, d.failed, rel(d.firstErr), rel(d.last), d.sample)
		t.Logf("%s: other keys: %d ok, %d failed, from %s until %s, longest without a success %.2fs (%s to %s) (%v)",
			stores[s].name, h.ok, h.failed, rel(h.firstErr), rel(h.last), h.maxGap.Seconds(), rel(h.maxGapFrom), rel(h.maxGapUntil), h.sample)
		if d.failed == 0 {
			t.Errorf("%s: no call on the dead master's keys failed: the test did not see the loss", stores[s].name)
		}
		if !d.lastOK.After(promoted) || d.last.After(promoted.Add(lossRecovery)) {
			t.Errorf("%s: the dead master's keys still failed %s after the promotion (last success %s); want at most %v",
				stores[s].name, rel(d.last), rel(d.lastOK), lossRecovery)
		}
		if h.last.After(promoted.Add(lossHealthySlack)) {
			t.Errorf("%s: the other masters' keys failed until %s after the promotion; want at most %v", stores[s].name, rel(h.last), lossHealthySlack)
		}
		if h.maxGap > promoted.Sub(killed)+lossHealthySlack {
			t.Errorf("%s: the other masters' keys went %.2fs without a success; the failover took %.2fs",
				stores[s].name, h.maxGap.Seconds(), promoted.Sub(killed).Seconds())
		}
	}
	// Each store asks for at most one reload per reloadEvery while its
	// calls fail; Open's client also reloads every
	// DefaultClusterStateReloadInterval while used.
	limit := int64(len(stores))*int64(observed/reloadEvery+2) + int64(observed/DefaultClusterStateReloadInterval+2)
	t.Logf("%d CLUSTER SLOTS in %.2fs for %d failed calls (at most %d allowed)", reloadCount, observed.Seconds(), failed, limit)
	if reloadCount > limit {
		t.Errorf("%d CLUSTER SLOTS in %.2fs; want at most %d: a failed call must not re-read the slot map each time", reloadCount, observed.Seconds(), limit)
	}
}

// TestClusterReloadPaced: calls that succeed never make a cluster client
// re-read the slot map, and calls that fail without a reply make it
// re-read the map at most once per reloadEvery, even when every reload
// fails too (go-redis then starts the next at once) and thousands of
// calls fail a second.
func TestClusterReloadPaced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	// The slot map comes from one node, at once or with an error: once the
	// nodes are dead every reload fails at once, and go-redis does not
	// hold back the next.
	probe := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	defer probe.Close()
	var loads atomic.Int64
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 cl.Addrs(),
		ContextTimeoutEnabled: true,
		// Fail at once, to make many failed calls.
		MaxRedirects:       -1,
		MaxRetries:         -1,
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
		ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) {
			loads.Add(1)
			return probe.ClusterSlots(ctx).Result()
		},
	})
	defer client.Close()
	st := mustStore(t, client, Config{Prefix: "paced:", Timeout: time.Second})
	ctx := context.Background()
	out := make([]core.Outcome, 1)
	takeKey := func(i int) error {
		return st.Take(ctx, []core.Item{item("api", fmt.Sprintf("user-%d", i), fixed(1<<40, time.Hour), 1, false)}, out)
	}
	if err := st.Preload(ctx); err != nil { // loading the library re-reads the map
		t.Fatal(err)
	}
	before := loads.Load()
	for i := 0; i < 300; i++ {
		if err := takeKey(i); err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load() - before; n != 0 {
		t.Errorf("300 successful calls re-read the slot map %d times; want none", n)
	}

	for _, n := range cl.Nodes {
		n.Kill()
	}
	before = loads.Load()
	start := time.Now()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]core.Outcome, 1)
			for i := w; time.Since(start) < 1500*time.Millisecond; i += 8 {
				if err := st.Take(ctx, []core.Item{item("api", fmt.Sprintf("user-%d", i), fixed(1<<40, time.Hour), 1, false)}, out); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(300 * time.Millisecond) // a reload asked for at the end runs
	n := loads.Load() - before
	limit := int64(took/reloadEvery) + 2
	t.Logf("%d failed calls in %.2fs re-read the slot map %d times (at most %d allowed)", failed.Load(), took.Seconds(), n, limit)
	if failed.Load() < 100 {
		t.Fatalf("only %d calls failed: the test needs many", failed.Load())
	}
	if n == 0 || n > limit {
		t.Errorf("%d failed calls in %.2fs re-read the slot map %d times; want 1 to %d", failed.Load(), took.Seconds(), n, limit)
	}
}
