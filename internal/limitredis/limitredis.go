// Package limitredis gives the router adapters' core/limittest runs a
// Redis store, so that each adapter checks itself on Redis as on memory.
package limitredis

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Store returns a limittest.Config.Store that gives every check one store
// on a redis-server of its own (skipped when redis-server is missing,
// unless QUOTAGATE_REQUIRE_REDIS=1; see redistest.Start). Its timeout is
// generous: a store call that times out fails open, which the checks
// would report as missing header fields.
func Store(t *testing.T) func(*testing.T) core.Store {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, redisstore.Config{Prefix: "limittest:", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return func(*testing.T) core.Store { return st }
}
