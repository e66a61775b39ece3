package e2e

import (
	"testing"
	"time"

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

// DelayedRedis returns the address of a proxy to the Redis at addr that
// holds every chunk of bytes for delay in each direction (a round trip
// through it takes twice the delay more), running in a process of its
// own (internal/redistest/delayproxy) and stopped when the test ends.
//
// The proxy stands in for a network, which does not slow down when the
// test's process is busy; a proxy in that process does, and a test that
// loads the example from it would measure its own load.
func DelayedRedis(t testing.TB, addr string, delay time.Duration) string {
	t.Helper()
	bin := Build(t, "github.com/quotagate/quotagate/internal/redistest/delayproxy")
	p := Start(t, bin, Config{Args: []string{"-to", addr, "-delay", delay.String()}})
	return p.Addr
}
