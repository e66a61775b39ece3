package redisstore_test

import (
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/redis/go-redis/v9"
)

// A budget that one big tenant spends from many instances: with a Lease,
// each instance takes slices of up to 500 units of a hot tenant's budget
// from Redis and admits from them locally. An Observer that is also a
// LeaseObserver (core/metrics' Metrics is one) counts the leases and the
// share of decisions served with no Redis call; Close gives back what the
// leases hold at shutdown.
func ExampleStore_Close() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close() // before the client closes: leases are given back through it
	engine := core.MustNew(core.Config{
		Store: store,
		Budgets: []core.Budget{{
			Name:    "tenant",
			Quota:   600_000,
			Window:  time.Minute,
			Key:     func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
			Leasing: core.Leasing{Max: 500, TTL: 250 * time.Millisecond},
		}},
	})
	_ = engine.MustLayer(core.Use("tenant"))
}
