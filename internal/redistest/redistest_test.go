package redistest

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if got := s.CLI("PING"); got != "PONG" {
		t.Fatalf("PING = %q", got)
	}
	if got := s.CLI("CONFIG", "GET", "appendonly"); !strings.HasSuffix(got, "no") {
		t.Fatalf("appendonly: %q", got)
	}
	if got := s.CLI("CONFIG", "GET", "save"); strings.TrimSpace(strings.TrimPrefix(got, "save")) != "" {
		t.Fatalf("save: %q", got)
	}
	s.CLI("SET", "k", "v")
	s.Kill()
	if s.Running() {
		t.Fatal("running after Kill")
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("port still accepts connections after Kill")
	}
	s.Restart()
	if !s.Running() {
		t.Fatal("not running after Restart")
	}
	if got := s.CLI("EXISTS", "k"); got != "0" {
		t.Fatalf("data survived a restart without persistence: EXISTS = %q", got)
	}
	s.Stop()
	s.Stop() // idempotent
	if s.Running() {
		t.Fatal("running after Stop")
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes seconds")
	}
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("addrs = %v", c.Addrs())
	}
	for _, n := range c.Nodes {
		info := n.CLI("CLUSTER", "INFO")
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Fatalf("node %s: %s", n.Addr(), info)
		}
	}
	// Masters own disjoint slot ranges covering all 16384 slots.
	if got := c.Nodes[0].CLI("CLUSTER", "INFO"); !strings.Contains(got, "cluster_size:3") {
		t.Fatalf("cluster_size: %s", got)
	}
}

// TestClusterWithReplicas: each master gets its replica, and killing a
// master promotes it within the node timeout plus a few seconds.
func TestClusterWithReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes seconds")
	}
	c := StartClusterWithReplicas(t, 3, 1, time.Second)
	if len(c.Nodes) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("%d masters, replicas %v", len(c.Nodes), c.Replicas)
	}
	for i, n := range c.Nodes {
		if got := n.CLI("ROLE"); !strings.HasPrefix(got, "master") {
			t.Fatalf("node %s: ROLE %q", n.Addr(), got)
		}
		if len(c.Replicas[i]) != 1 {
			t.Fatalf("master %s: replicas %v", n.Addr(), c.Replicas[i])
		}
		r := c.Replicas[i][0]
		if got := r.CLI("ROLE"); !strings.HasPrefix(got, "slave") || !strings.Contains(got, strconv.Itoa(n.Port())) {
			t.Fatalf("replica %s of %s: ROLE %q", r.Addr(), n.Addr(), got)
		}
	}
	if got := c.Nodes[0].CLI("CLUSTER", "INFO"); infoField(got, "cluster_known_nodes") != "6" || infoField(got, "cluster_size") != "3" {
		t.Fatalf("CLUSTER INFO: %s", got)
	}
	c.Nodes[1].Kill()
	start := time.Now()
	if got := c.WaitFailover(1, 30*time.Second); got != c.Replicas[1][0] {
		t.Fatalf("WaitFailover returned %v, want the replica %s", got, c.Replicas[1][0].Addr())
	}
	t.Logf("replica promoted %v after the kill", time.Since(start).Round(10*time.Millisecond))
	for _, n := range []*Server{c.Nodes[0], c.Nodes[2]} {
		if got := n.CLI("CLUSTER", "INFO"); infoField(got, "cluster_state") != "ok" {
			t.Fatalf("node %s after the failover: %s", n.Addr(), got)
		}
	}
}

func TestBlackhole(t *testing.T) {
	addr := Blackhole(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = bufio.NewReader(c).ReadByte()
	var ne net.Error
	if err == nil || !asNetErr(err, &ne) || !ne.Timeout() {
		t.Fatalf("read from blackhole: err = %v, want a timeout", err)
	}
}

func asNetErr(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

func TestSentinelFailsOver(t *testing.T) {
	d := StartSentinel(t, "mymaster", 1)
	if got := d.MasterAddr(); got != d.Master.Addr() {
		t.Fatalf("sentinel reports master %s, want %s", got, d.Master.Addr())
	}
	d.Master.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for d.MasterAddr() != d.Replicas[0].Addr() {
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s: master is %s", d.Replicas[0].Addr(), d.MasterAddr())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSentinelPlannedFailover(t *testing.T) {
	d := StartSentinels(t, "mymaster", 1, 2)
	if len(d.Sentinels) != 2 || d.Sentinel != d.Sentinels[0] {
		t.Fatalf("want 2 sentinels, the first as Sentinel: %v", d.Sentinels)
	}
	promoted := d.Failover(d.Sentinels[1], 30*time.Second)
	if promoted != d.Replicas[0] {
		t.Fatalf("promoted %s, want the replica %s", promoted.Addr(), d.Replicas[0].Addr())
	}
	if role := promoted.CLI("ROLE"); !strings.HasPrefix(role, "master") {
		t.Fatalf("the promoted replica reports ROLE %q", role)
	}
	if got := d.MasterAddr(); got != promoted.Addr() {
		t.Logf("the other sentinel still names %s (it learns within seconds)", got)
	}
}

// TestServeDelayed: a round trip through the proxy takes at least twice
// its delay, and the proxy forwards what Redis answers.
func TestServeDelayed(t *testing.T) {
	srv := Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const delay = 20 * time.Millisecond
	t.Cleanup(ServeDelayed(l, srv.Addr(), delay))
	CheckDelayed(t, l.Addr().String(), delay)
}
