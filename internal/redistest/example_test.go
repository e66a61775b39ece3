package redistest_test

import (
	"testing"
	"time"

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

// A cluster of three masters with one replica each, whose nodes notice a
// dead master within a second; the test kills a master and waits for its
// replica to take over.
func ExampleStartClusterWithReplicas() {
	var t *testing.T // the test's *testing.T
	c := redistest.StartClusterWithReplicas(t, 3, 1, time.Second)
	c.Nodes[0].Kill()
	promoted := c.WaitFailover(0, 30*time.Second) // c.Replicas[0][0], now a master
	_ = promoted.Addr()
}
