package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// shardedStore places a key on the shard its first letter names ("a..."
// on 0, "b..." on 1, anything else on none) and fails the calls of the
// shards marked down.
type shardedStore struct {
	core.Store
	mu   sync.Mutex
	down map[int]bool
}

func shardOf(key string) int {
	if key != "" && key[0] >= 'a' && key[0] <= 'b' {
		return int(key[0] - 'a')
	}
	return -1
}

func (s *shardedStore) Shard(items []core.Item) int {
	sh := shardOf(items[0].Key)
	for _, it := range items[1:] {
		if shardOf(it.Key) != sh {
			return -1
		}
	}
	return sh
}

func (s *shardedStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	s.mu.Lock()
	down := s.down[s.Shard(items)]
	s.mu.Unlock()
	if down {
		return errDown
	}
	return s.Store.Take(ctx, items, out)
}

func (s *shardedStore) set(shard int, down bool) {
	s.mu.Lock()
	s.down[shard] = down
	s.mu.Unlock()
}

// TestBreakerPerShard: with a ShardedStore, a shard's failures open the
// breaker of its own keys; the other shards' keys are still decided by
// the store. OnBreaker hears one opening when the first shard's breaker
// opens and one closing when the last closes, and BreakerOpen is true
// while any is open.
func TestBreakerPerShard(t *testing.T) {
	c := newFakeClock(t0)
	st := &shardedStore{Store: newStore(t, c), down: map[int]bool{}}
	var changes []bool
	e := core.MustNew(core.Config{
		Store: st, Clock: c, BreakerThreshold: 2, BreakerCooldown: time.Second,
		OnBreaker: func(open bool) { changes = append(changes, open) },
		Budgets:   []core.Budget{{Name: "b", Quota: 100, Window: time.Minute, Key: remoteAddrKey}},
	})
	l := e.MustLayer(core.Use("b"))
	st.set(0, true)
	for range 2 {
		decide(l, request("GET", "a1"))
	}
	if d := decide(l, request("GET", "a1")); !errors.Is(d.Err, core.ErrBreakerOpen) {
		t.Fatalf("shard 0 after 2 failures: err %v, want its breaker open", d.Err)
	}
	for _, k := range []string{"b1", "z1"} {
		if d := decide(l, request("GET", k)); d.Err != nil || result(t, d, "b").Remaining != 99 {
			t.Fatalf("key %s, off the failing shard: err %v; want decided by the store", k, d.Err)
		}
	}
	c.Advance(500 * time.Millisecond)
	st.set(1, true)
	for range 2 {
		decide(l, request("GET", "b1"))
	}
	if !e.BreakerOpen() || len(changes) != 1 || !changes[0] {
		t.Fatalf("two shards open: BreakerOpen %v, OnBreaker %v; want true, [true]", e.BreakerOpen(), changes)
	}
	c.Advance(600 * time.Millisecond) // shard 0's cooldown is over, shard 1's is not
	st.set(0, false)
	if d := decide(l, request("GET", "a1")); d.Err != nil { // the probe closes shard 0's
		t.Fatalf("shard 0's probe: %v", d.Err)
	}
	if !e.BreakerOpen() || len(changes) != 1 {
		t.Fatalf("shard 1 still open: BreakerOpen %v, OnBreaker %v; want true, [true]", e.BreakerOpen(), changes)
	}
	c.Advance(500 * time.Millisecond)
	st.set(1, false)
	decide(l, request("GET", "b1"))
	if e.BreakerOpen() || len(changes) != 2 || changes[1] {
		t.Fatalf("every shard closed: BreakerOpen %v, OnBreaker %v; want false, [true false]", e.BreakerOpen(), changes)
	}
}
