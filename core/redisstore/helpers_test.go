package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// fakeClock is a core.Clock the test moves by hand.
type fakeClock struct{ us atomic.Int64 }

func newFakeClock(us int64) *fakeClock {
	c := &fakeClock{}
	c.us.Store(us)
	return c
}

func (c *fakeClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }
func (c *fakeClock) add(d int64)    { c.us.Add(d) }
func (c *fakeClock) set(us int64)   { c.us.Store(us) }
func (c *fakeClock) micros() int64  { return c.us.Load() }

// newClient returns a client for addr with context deadlines honoured,
// closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// mustStore returns a store, with a generous deadline unless opt sets
// one: tests other than the fault tests must not fail because a shared
// machine is slow.
func mustStore(t testing.TB, client redis.UniversalClient, opt Config) *Store {
	t.Helper()
	if opt.Timeout == 0 {
		opt.Timeout = 10 * time.Second
	}
	s, err := New(client, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keysWith returns every key of the server starting with prefix.
func keysWith(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	ctx := context.Background()
	scan := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return iter.Err()
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster calls concurrently
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			var ks []string
			iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				ks = append(ks, iter.Val())
			}
			mu.Lock()
			keys = append(keys, ks...)
			mu.Unlock()
			return iter.Err()
		})
	case *redis.Ring:
		var mu sync.Mutex
		err = cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(ctx, cc)
	default:
		t.Fatalf("keysWith: unsupported client %T", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// assertTTLs fails unless every key starting with prefix has a TTL.
func assertTTLs(t testing.TB, c redis.UniversalClient, prefix string) int {
	t.Helper()
	keys := keysWith(t, c, prefix)
	for _, k := range keys {
		ttl, err := c.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// go-redis reports -1 (no TTL) and -2 (gone) as those many
		// nanoseconds; a key that expired between SCAN and PTTL is fine.
		if ttl == -1 {
			t.Errorf("key %q has no TTL", k)
		}
	}
	return len(keys)
}

// commandCalls returns INFO commandstats' call count for cmd (e.g.
// "evalsha") on a single server.
func commandCalls(t testing.TB, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			continue
		}
		for _, f := range strings.Split(strings.TrimPrefix(line, "cmdstat_"+cmd+":"), ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	return 0
}

// newRing starts n servers and returns a go-redis Ring of them, closed
// when the test ends.
func newRing(t testing.TB, n int) *redis.Ring {
	t.Helper()
	addrs := make(map[string]string, n)
	for i := range n {
		addrs["s"+strconv.Itoa(i)] = redistest.Start(t).Addr()
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	return ring
}

// startServer starts a redis-server for the test and returns a client.
func startServer(t testing.TB) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, newClient(t, srv.Addr())
}

// item is shorthand for a core.Item.
func item(budget, key string, l core.Limit, cost int64, shadow bool) core.Item {
	return core.Item{Budget: budget, Key: key, Limit: l, Cost: cost, Shadow: shadow}
}

// keysByMaster returns n partition keys ("user-<i>") of the store prefix
// whose hash slot the master at addr holds, and n whose slot another
// master holds, as cc's slot map says.
func keysByMaster(t testing.TB, cc *redis.ClusterClient, prefix, addr string, n int) (on, off []string) {
	t.Helper()
	slots, err := cc.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; len(on) < n || len(off) < n; i++ {
		key := fmt.Sprintf("user-%d", i)
		k, a, b := partitionKey(prefix, key)
		slot := slotOf(k[a:b])
		for _, r := range slots {
			if slot >= int(r.Start) && slot <= int(r.End) {
				if r.Nodes[0].Addr == addr {
					on = append(on, key)
				} else {
					off = append(off, key)
				}
			}
		}
	}
	return on, off
}
