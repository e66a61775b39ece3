package e2e

import (
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// Redis is a throwaway redis-server on 127.0.0.1 (see internal/redistest):
// Addr for the examples' -redis flag, Kill to crash it, Restart to bring it
// back, empty, on the same port.
type Redis = redistest.Server

// StartRedis starts a redis-server on a free 127.0.0.1 port, stopped when
// the test ends. It skips the test when redis-server is not installed,
// unless QUOTAGATE_REQUIRE_REDIS=1, which fails it instead.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return redistest.Start(t)
}
