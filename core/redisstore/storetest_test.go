package redisstore

import (
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/storetest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestStoreKit runs the store kit on a single node and on a cluster of
// three masters.
func TestStoreKit(t *testing.T) {
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
