package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/redis/go-redis/v9"
)

// A store on one Redis server, shared by every instance of the service.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // the store's 50 ms deadline bounds each call
		MaxRetries:            -1,   // never run a decision's script twice
	})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{Prefix: "myapp:rl:"})
	if err != nil {
		panic(err)
	}
	engine := core.MustNew(core.Config{
		Store: store,
		Budgets: []core.Budget{{
			Name:   "api",
			Quota:  1000,
			Window: time.Hour,
			Key:    func(r *core.Request) (string, error) { return r.RemoteAddr, nil },
		}},
	})
	_ = engine.MustLayer(core.Use("api")) // for an adapter, e.g. nethttp
}

// Redis Cluster: budgets keyed by the same partition share a hash slot; a
// decision whose keys span slots is one pipelined round trip, undone as a
// whole if any slot denies.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		panic(err)
	}
	// Load the scripts on every master now rather than on first use.
	if err := store.Preload(context.Background()); err != nil {
		fmt.Println("redis not reachable yet:", err)
	}
}

// Sentinel: a failover client is a *redis.Client.
func ExampleNew_sentinel() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "ratelimits",
		SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	if _, err := redisstore.New(client, redisstore.Config{Timeout: 30 * time.Millisecond}); err != nil {
		panic(err)
	}
}

// Key shows where a partition's budgets live, e.g. to inspect them with
// redis-cli, and LogKey where a sliding log keeps its entries. Partitions
// that are long or hold unusual bytes are hashed.
func ExampleStore_Key() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, _ := redisstore.New(client, redisstore.Config{Prefix: "myapp:rl:"})
	fmt.Println(store.Key("tenant:42"))
	fmt.Println(store.Key("acme corp"))
	fmt.Println(store.LogKey("t_mutate", "tenant:42"))
	// Output:
	// myapp:rl:{tenant:42}#h
	// myapp:rl:{#ea6f9c07a2f95c788a1645cf557f58aa}#h
	// myapp:rl:{tenant:42}:t_mutate
}
