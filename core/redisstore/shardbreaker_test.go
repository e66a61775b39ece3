package redisstore

import (
	"bytes"
	"errors"
	lslog "log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestBreakerPerShard: on a Redis Cluster, the engine's circuit breaker
// opens for the master that fails, not for the store: once a dead
// master's keys have opened its breaker, the other masters' keys are
// still decided by Redis (no error, no failure mode), while the dead
// master's skip the store at once. OnBreaker hears one opening.
func TestBreakerPerShard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cl.Addrs())
	st := mustStore(t, cc, Config{Prefix: "shard:", Timeout: 200 * time.Millisecond})
	victim := cl.Nodes[0]
	doomed, healthy := keysByMaster(t, cc, "shard:", victim.Addr(), 16)
	var opened, closed atomic.Int32
	var logs bytes.Buffer
	eng := core.MustNew(core.Config{
		Store: st, BreakerThreshold: 3, BreakerCooldown: time.Minute,
		Logger: lslog.New(lslog.NewTextHandler(&logs, nil)),
		OnBreaker: func(open bool) {
			if open {
				opened.Add(1)
			} else {
				closed.Add(1)
			}
		},
		Budgets: []core.Budget{{Name: "api", Quota: 1000, Window: time.Hour,
			Key: func(r *core.Request) (string, error) { return r.Route, nil }}},
	})
	layer := eng.MustLayer(core.Use("api"))
	decide := func(key string) *core.Decision {
		d := new(core.Decision)
		layer.Decide(&core.Request{Method: "GET", Route: key}, d)
		return d
	}
	for _, k := range append(doomed, healthy...) {
		if d := decide(k); d.Err != nil {
			t.Fatalf("before the kill, key %s: %v", k, d.Err)
		}
	}

	victim.Kill()
	for _, k := range doomed {
		if d := decide(k); d.Err == nil {
			t.Fatalf("key %s of the dead master decided without an error", k)
		}
	}
	if d := decide(doomed[0]); !errors.Is(d.Err, core.ErrBreakerOpen) {
		t.Fatalf("after %d failures on the dead master, its key: err %v, want the breaker open", len(doomed), d.Err)
	}
	if !eng.BreakerOpen() || opened.Load() != 1 {
		t.Errorf("BreakerOpen %v, OnBreaker opened %d times; want true, once", eng.BreakerOpen(), opened.Load())
	}
	for _, k := range healthy {
		if d := decide(k); d.Err != nil || d.Results[0].FailedOpen || d.Results[0].Remaining != 998 {
			t.Fatalf("key %s of a healthy master, with the dead master's breaker open: err %v, result %+v; want decided by Redis (998 remaining)", k, d.Err, d.Results[0].Outcome)
		}
	}
	// The healthy masters' answers do not end the spell in the log.
	if strings.Contains(logs.String(), "recovered") || !strings.Contains(logs.String(), "store call failed") {
		t.Errorf("log, with one master dead and the others answering:\n%s\nwant its failure and no recovery", logs.String())
	}
}

// TestShardNeverWaits: Shard runs before every Take, outside the store's
// deadline, so it must never wait on the network. A cluster store opened
// lazily on servers that accept connections and never answer has no slot
// map yet: Shard says -1 at once instead of loading the map.
func TestShardNeverWaits(t *testing.T) {
	var addrs []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() { // accept, never answer
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	st, client, err := Open(strings.Join(addrs, ","), Config{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	done := make(chan int, 1)
	go func() { done <- st.Shard([]core.Item{item("api", "k", fixed(5, time.Minute), 1, false)}) }()
	select {
	case got := <-done:
		if got != -1 {
			t.Errorf("Shard without a slot map = %d, want -1", got)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Shard still waiting after 2s on servers that never answer")
	}
}
