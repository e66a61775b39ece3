package redisstore

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/storetest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestStoreKit runs the store kit on a single node, on a cluster of
// three masters and on a go-redis Ring of two servers.
func TestStoreKit(t *testing.T) {
	t.Run("ring", func(t *testing.T) {
		ring := newRing(t, 2)
		storetest.Run(t, storetest.Config{New: func() (core.Store, error) { return mustStore(t, ring, Config{Prefix: "kit:"}), nil }})
	})
	t.Run("single", func(t *testing.T) {
		_, client := startServer(t)
		storetest.Run(t, storetest.Config{New: func() (core.Store, error) { return mustStore(t, client, Config{Prefix: "kit:"}), nil }})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		client := newClusterClient(t, cl.Addrs())
		storetest.Run(t, storetest.Config{New: func() (core.Store, error) { return mustStore(t, client, Config{Prefix: "kit:"}), nil }})
	})
}

// TestBounds: the Redis store admits no more than each algorithm's
// documented worst case under adversarial arrivals (storetest.Bounds),
// with the scripts given the kit's clock, on a single node and a cluster.
func TestBounds(t *testing.T) { onFakeTime(t, "bounds:", storetest.Bounds) }

// TestTime: the Redis store rolls windows over, refills buckets, forgets
// idle keys and applies changed quotas exactly as the algorithms'
// definitions say, to the microsecond (storetest.Time), with the scripts
// given the kit's clock, on a single node and a cluster.
func TestTime(t *testing.T) {
	onFakeTime(t, "time:", func(t *testing.T, open storetest.OpenAt) { storetest.Time(t, open) })
}

// onFakeTime runs check on a single node and on a cluster, with stores
// under prefix whose scripts read the clock the kit gives.
func onFakeTime(t *testing.T, prefix string, check func(*testing.T, storetest.OpenAt)) {
	open := func(t *testing.T, client redis.UniversalClient) storetest.OpenAt {
		return func(clock core.Clock) (core.Store, error) {
			useFakeTime(t, client, clock, 10*time.Minute)
			return mustStore(t, client, Config{Prefix: prefix}), nil
		}
	}
	t.Run("single", func(t *testing.T) {
		_, client := startServer(t)
		check(t, open(t, client))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		check(t, open(t, newClusterClient(t, cl.Addrs())))
	})
}
