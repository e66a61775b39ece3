package redistest_test

import (
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// A test starts its own server and points a client at Addr; the server is
// stopped when the test ends.
func ExampleStart() {
	var t *testing.T // the test's *testing.T
	s := redistest.Start(t)
	_ = s.Addr() // "127.0.0.1:<port>", for redis.Options.Addr
	s.Kill()     // simulate a crash
	s.Restart()  // same port, empty data
}

// A cluster of three masters for go-redis's ClusterClient.
func ExampleStartCluster() {
	var t *testing.T // the test's *testing.T
	c := redistest.StartCluster(t, 3)
	_ = c.Addrs() // for redis.ClusterOptions.Addrs
}
