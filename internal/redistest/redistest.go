// Package redistest starts throwaway redis-server processes for tests: a
// single node on a free 127.0.0.1 port, a cluster built with redis-cli
// --cluster create (masters only, or masters with replicas that take over
// when a test kills their master), or a Sentinel deployment (one or more
// Sentinels, and a planned failover on demand). Everything a test starts
// is stopped by t.Cleanup.
//
// When redis-server is not on PATH the helpers skip the test with a clear
// message, unless QUOTAGATE_REQUIRE_REDIS=1, in which case they fail it.
//
// The servers run without persistence (--save "" --appendonly no), bound to
// 127.0.0.1, with their files in a test temporary directory.
package redistest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing redis-server
// into a test failure instead of a skip.
const RequireEnv = "QUOTAGATE_REQUIRE_REDIS"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Binaries returns the paths of redis-server and redis-cli, or skips (or
// fails, with QUOTAGATE_REQUIRE_REDIS=1) the test when either is missing.
func Binaries(t testing.TB) (server, cli string) {
	t.Helper()
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err := errors.Join(err1, err2); err != nil {
		msg := fmt.Sprintf("redistest: redis-server and redis-cli must be on PATH to run this test (%v)", err)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s; %s=1 requires them", msg, RequireEnv)
		}
		t.Skipf("%s; skipping (set %s=1 to fail instead)", msg, RequireEnv)
	}
	return server, cli
}

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	t       testing.TB
	bin     string
	cli     string
	port    int
	dir     string
	logPath string
	args    []string
	conf    string // a Sentinel's configuration file; "" for a plain server

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a redis-server on a free 127.0.0.1 port and waits until it
// answers PING. extra are additional configuration arguments, e.g.
// "--maxmemory", "10mb". The server is stopped when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, cli := Binaries(t)
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := &Server{t: t, bin: bin, cli: cli, port: port, dir: dir,
			logPath: filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)), args: extra}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v", lastErr)
	return nil
}

// Addr returns the server's address, "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.dir }

func (s *Server) commandLine() []string {
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"}
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", s.logPath,
	)
	return append(args, s.args...)
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.commandLine()...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start-up; log:\n%s", s.port, s.logTail())
		default:
		}
		if out, err := s.cliOut("PING"); err == nil && strings.TrimSpace(out) == "PONG" {
			// Another test's server may hold the port (this one then exits,
			// unable to bind it) and answer the PING: make sure it is ours.
			if pid := s.pid(); pid != cmd.Process.Pid {
				s.signal(syscall.SIGKILL)
				<-done
				return fmt.Errorf("port %d is served by another redis-server (pid %d, ours %d)", s.port, pid, cmd.Process.Pid)
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.signal(syscall.SIGKILL)
	<-done
	return fmt.Errorf("redis-server on port %d did not answer PING within %v; log:\n%s", s.port, startTimeout, s.logTail())
}

// pid returns the process id of the redis-server answering on s's port,
// or 0.
func (s *Server) pid() int {
	out, err := s.cliOut("INFO", "server")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// wait waits for the current process to exit, killing it after timeout.
func (s *Server) wait(timeout time.Duration) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(timeout):
		s.signal(syscall.SIGKILL)
		<-done
	}
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Stop shuts the server down (SIGTERM, then SIGKILL after 5 s) and waits
// for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if !s.Running() {
		return
	}
	s.signal(syscall.SIGTERM)
	s.wait(5 * time.Second)
}

// Kill ends the server abruptly with SIGKILL, as a crash would, and waits
// for it to exit.
func (s *Server) Kill() {
	if !s.Running() {
		return
	}
	s.signal(syscall.SIGKILL)
	s.wait(5 * time.Second)
}

// Restart starts the server again on the same port with the same
// configuration (and no data, since nothing is persisted), stopping it
// first if it is running.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restarting redis-server: %v", err)
}

func (s *Server) cliOut(args ...string) (string, error) {
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, args...)
	out, err := exec.Command(s.cli, full...).CombinedOutput()
	return string(out), err
}

// CLI runs redis-cli against the server with args (e.g. "SCRIPT", "FLUSH")
// and returns its trimmed output. It fails the test if redis-cli fails.
func (s *Server) CLI(args ...string) string {
	s.t.Helper()
	out, err := s.cliOut(args...)
	if err != nil {
		s.t.Fatalf("redistest: redis-cli %s on %s: %v\n%s", strings.Join(args, " "), s.Addr(), err, out)
	}
	return strings.TrimSpace(out)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Cluster is a Redis Cluster on 127.0.0.1: masters, and replicas when
// started by [StartClusterWithReplicas].
type Cluster struct {
	// Nodes are the masters at start-up, in the order they were created.
	Nodes []*Server
	// Replicas holds the replicas of Nodes[i] at start-up in Replicas[i];
	// nil for a cluster without replicas.
	Replicas [][]*Server
}

// Addrs returns the addresses of the masters at start-up.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// StartCluster starts masters redis-server processes (at least 3) in
// cluster mode on free ports, joins them with
// redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes, and
// waits until every node reports cluster_state:ok. Everything is stopped
// when the test ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, 0, 5*time.Second)
}

// StartClusterWithReplicas starts a cluster of masters (at least 3), each
// with replicas replicas (at least 1), whose nodes consider a node that
// has not answered for nodeTimeout failing (cluster-node-timeout, whole
// milliseconds): a replica is promoted about nodeTimeout plus one to two
// seconds after its master dies. It returns once every node reports
// cluster_state:ok and every replica has completed its first sync with its
// master, so that a replica can take over at once. Everything is stopped
// when the test ends.
func StartClusterWithReplicas(t testing.TB, masters, replicas int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	if replicas < 1 {
		t.Fatalf("redistest: StartClusterWithReplicas needs at least 1 replica per master, not %d (StartCluster starts one without)", replicas)
	}
	if nodeTimeout < time.Millisecond {
		t.Fatalf("redistest: node timeout %v: want 1ms or more", nodeTimeout)
	}
	return startCluster(t, masters, replicas, nodeTimeout)
}

func startCluster(t testing.TB, masters, replicas int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, not %d", masters)
	}
	_, cli := Binaries(t)
	var all []*Server
	for i := 0; i < masters*(1+replicas); i++ {
		bus, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		dir := t.TempDir()
		all = append(all, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		))
	}
	args := []string{"--cluster", "create"}
	for _, n := range all {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range all {
		for {
			info, err := n.cliOut("CLUSTER", "INFO")
			if err == nil && infoField(info, "cluster_state") == "ok" && infoField(info, "cluster_slots_ok") == "16384" &&
				infoField(info, "cluster_known_nodes") == strconv.Itoa(len(all)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ready:\n%s", n.Addr(), info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if replicas == 0 {
		return &Cluster{Nodes: all}
	}
	// redis-cli chooses the roles: read them from the cluster, once every
	// node agrees on them (a replica's role reaches the others by gossip,
	// and a master votes for a replica's promotion only if it knows it as
	// its dead master's replica).
	var c *Cluster
	for {
		var why string
		for _, n := range all {
			var v *Cluster
			if v, why = clusterView(all, n, masters, replicas); v == nil {
				break
			}
			if n == all[0] {
				c = v
			}
		}
		if why == "" {
			break
		}
		c = nil
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the cluster's roles are not settled: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, rs := range c.Replicas {
		for _, r := range rs {
			for {
				info, err := r.cliOut("INFO", "replication")
				if err == nil && strings.Contains(info, "master_link_status:up") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("redistest: replica %s not in sync with %s:\n%s", r.Addr(), c.Nodes[i].Addr(), info)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return c
}

// clusterView returns the masters and replicas of the cluster of all as
// n's CLUSTER NODES describes them, or nil and why when it does not show
// masters masters, each serving slots and with replicas replicas.
func clusterView(all []*Server, n *Server, masters, replicas int) (*Cluster, string) {
	out, err := n.cliOut("CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Sprintf("CLUSTER NODES on %s: %v\n%s", n.Addr(), err, out)
	}
	c := &Cluster{}
	byID := map[string]*Server{}
	masterOf := map[*Server]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Sprintf("%s: CLUSTER NODES line %q", n.Addr(), line)
		}
		s := serverAt(all, f[1])
		if s == nil {
			return nil, fmt.Sprintf("%s: CLUSTER NODES names a node that is not ours: %s", n.Addr(), line)
		}
		byID[f[0]] = s
		switch {
		case strings.Contains(f[2], "master") && len(f) > 8: // serves slots
			c.Nodes = append(c.Nodes, s)
		case strings.Contains(f[2], "slave"):
			masterOf[s] = f[3]
		default:
			return nil, fmt.Sprintf("%s sees %s as neither a master with slots nor a replica:\n%s", n.Addr(), s.Addr(), out)
		}
	}
	if len(c.Nodes) != masters {
		return nil, fmt.Sprintf("%s sees %d masters, not %d:\n%s", n.Addr(), len(c.Nodes), masters, out)
	}
	slices.SortFunc(c.Nodes, func(a, b *Server) int { return slices.Index(all, a) - slices.Index(all, b) })
	c.Replicas = make([][]*Server, masters)
	for _, s := range all {
		if id, ok := masterOf[s]; ok {
			i := slices.Index(c.Nodes, byID[id])
			if i < 0 {
				return nil, fmt.Sprintf("%s sees %s follow %s, which is not a master:\n%s", n.Addr(), s.Addr(), id, out)
			}
			c.Replicas[i] = append(c.Replicas[i], s)
		}
	}
	for i, rs := range c.Replicas {
		if len(rs) != replicas {
			return nil, fmt.Sprintf("%s sees %d replicas of %s, not %d:\n%s", n.Addr(), len(rs), c.Nodes[i].Addr(), replicas, out)
		}
	}
	return c, ""
}

// infoField returns the value of field in INFO or CLUSTER INFO output, or
// "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// serverAt returns the server of all whose port a CLUSTER NODES address
// ("127.0.0.1:7000@17000", and ",hostname" on Redis 7) names, or nil.
func serverAt(all []*Server, addr string) *Server {
	addr, _, _ = strings.Cut(addr, "@")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	for _, n := range all {
		if strconv.Itoa(n.port) == port {
			return n
		}
	}
	return nil
}

// WaitFailover waits, after Nodes[i] was killed, until one of its replicas
// reports itself master and every node still running reports
// cluster_state:ok with all 16384 slots served (none by a node flagged
// failing), and returns that replica. It polls every 20 ms, so it returns
// at most that long (plus a redis-cli call per node) after the cluster
// says so. It fails the test after timeout.
func (c *Cluster) WaitFailover(i int, timeout time.Duration) *Server {
	dead := c.Nodes[i]
	dead.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		promoted, state := c.failedOver(i)
		if promoted != nil {
			return promoted
		}
		if time.Now().After(deadline) {
			dead.t.Fatalf("redistest: no replica of %s took over within %v: %s", dead.Addr(), timeout, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failedOver returns the replica of Nodes[i] that took over once the
// cluster is whole again, or nil and what is still missing.
func (c *Cluster) failedOver(i int) (*Server, string) {
	var promoted *Server
	for _, r := range c.Replicas[i] {
		if out, err := r.cliOut("ROLE"); err == nil && strings.HasPrefix(out, "master") {
			promoted = r
			break
		}
	}
	if promoted == nil {
		return nil, "no replica reports ROLE master"
	}
	for _, n := range c.running() {
		info, err := n.cliOut("CLUSTER", "INFO")
		if err != nil || infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_slots_ok") != "16384" {
			return nil, fmt.Sprintf("node %s: %v\n%s", n.Addr(), err, info)
		}
	}
	return promoted, ""
}

// running returns every node of the cluster whose process is alive.
func (c *Cluster) running() []*Server {
	var ns []*Server
	for i, n := range c.Nodes {
		if n.Running() {
			ns = append(ns, n)
		}
		if i < len(c.Replicas) {
			for _, r := range c.Replicas[i] {
				if r.Running() {
					ns = append(ns, r)
				}
			}
		}
	}
	return ns
}

// Sentinel is a Redis Sentinel deployment on 127.0.0.1: a master, its
// replicas and Sentinel processes that monitor them, each with quorum 1.
type Sentinel struct {
	// Master is the server that was master at start-up.
	Master *Server
	// Replicas replicate Master.
	Replicas []*Server
	// Sentinel is the first Sentinel process (Sentinels[0]).
	Sentinel *Server
	// Sentinels are every Sentinel process; one unless started by
	// [StartSentinels].
	Sentinels []*Server
	// Name is the monitored master's name.
	Name string
}

// StartSentinel starts a master, replicas replica servers and a Sentinel
// that monitors the master as name, declares it down after 500 ms and
// fails over to a replica. It waits until the Sentinel knows every replica.
// Everything is stopped when the test ends.
func StartSentinel(t testing.TB, name string, replicas int) *Sentinel {
	t.Helper()
	return StartSentinels(t, name, replicas, 1)
}

// StartSentinels is [StartSentinel] with n Sentinels (at least 1), each
// with quorum 1, so that any of them fails the master over on its own. It
// also waits until every Sentinel knows the n-1 others (they find each
// other through the master, within a few seconds).
func StartSentinels(t testing.TB, name string, replicas, n int) *Sentinel {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartSentinels needs at least 1 Sentinel, not %d", n)
	}
	d := &Sentinel{Master: Start(t), Name: name}
	for i := 0; i < replicas; i++ {
		d.Replicas = append(d.Replicas, Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(d.Master.Port())))
	}
	for i := 0; i < n; i++ {
		d.Sentinels = append(d.Sentinels, d.startSentinel(t))
	}
	d.Sentinel = d.Sentinels[0]
	deadline := time.Now().Add(30 * time.Second)
	for _, sn := range d.Sentinels {
		for {
			out, err := sn.cliOut("SENTINEL", "REPLICAS", name)
			others, err2 := sn.cliOut("SENTINEL", "SENTINELS", name)
			if err == nil && err2 == nil && strings.Count(out, "ip\n127.0.0.1\n") >= replicas && d.replicasLinked() &&
				strings.Count(others, "ip\n127.0.0.1\n") >= n-1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s does not see %d replicas and %d other sentinels of %s:\n%s\n%s", sn.Addr(), replicas, n-1, name, out, others)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return d
}

// startSentinel starts one Sentinel of the deployment, with a
// configuration file of its own (Sentinel rewrites it).
func (d *Sentinel) startSentinel(t testing.TB) *Server {
	t.Helper()
	bin, cli := Binaries(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 500\n"+
		"sentinel failover-timeout %s 5000\n", d.Name, d.Master.Port(), d.Name, d.Name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := &Server{t: t, bin: bin, cli: cli, port: port, dir: dir, conf: conf,
			logPath: filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", port))}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: cannot start a sentinel: %v", lastErr)
	return nil
}

// replicasLinked reports whether every replica has finished its initial
// sync with the master.
func (d *Sentinel) replicasLinked() bool {
	for _, r := range d.Replicas {
		out, err := r.cliOut("INFO", "replication")
		if err != nil || !strings.Contains(out, "master_link_status:up") {
			return false
		}
	}
	return true
}

// Failover runs SENTINEL FAILOVER on the Sentinel via (one of Sentinels),
// a planned failover: via promotes a replica while the master is up. It
// returns the promoted server once via has announced it (+switch-master):
// SENTINEL MASTER on via names another server than before, with no
// failover in progress. It fails the test if via refuses the command or
// the failover takes longer than timeout.
func (d *Sentinel) Failover(via *Server, timeout time.Duration) *Server {
	via.t.Helper()
	before := d.masterView(via)
	if out := via.CLI("SENTINEL", "FAILOVER", d.Name); out != "OK" {
		via.t.Fatalf("redistest: SENTINEL FAILOVER %s on %s: %s", d.Name, via.Addr(), out)
	}
	deadline := time.Now().Add(timeout)
	for {
		m := d.masterView(via)
		if m["port"] != before["port"] && !strings.Contains(m["flags"], "failover_in_progress") {
			for _, s := range append([]*Server{d.Master}, d.Replicas...) {
				if strconv.Itoa(s.port) == m["port"] {
					return s
				}
			}
			via.t.Fatalf("redistest: sentinel %s names master %s:%s, which is none of the deployment's servers", via.Addr(), m["ip"], m["port"])
		}
		if time.Now().After(deadline) {
			via.t.Fatalf("redistest: the failover of %s did not end within %v: %v", d.Name, timeout, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// masterView returns SENTINEL MASTER's fields on the Sentinel sn.
func (d *Sentinel) masterView(sn *Server) map[string]string {
	sn.t.Helper()
	f := strings.Split(sn.CLI("SENTINEL", "MASTER", d.Name), "\n")
	m := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		m[f[i]] = f[i+1]
	}
	return m
}

// MasterAddr returns the master's address as the Sentinel reports it.
func (d *Sentinel) MasterAddr() string {
	d.Sentinel.t.Helper()
	out := strings.Fields(d.Sentinel.CLI("SENTINEL", "GET-MASTER-ADDR-BY-NAME", d.Name))
	if len(out) != 2 {
		d.Sentinel.t.Fatalf("redistest: sentinel answers %q for the master's address", out)
	}
	return net.JoinHostPort(out[0], out[1])
}

// Blackhole returns the address of a 127.0.0.1 TCP listener that accepts
// connections and never answers, as a hung Redis would. It is closed, with
// every connection it accepted, when the test ends.
func Blackhole(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: blackhole listener: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// ServeDelayed serves on l a TCP proxy to addr that holds every chunk of
// bytes, in each direction, for delay before passing it on, as a network
// between a client and Redis would: a round trip through it takes twice
// the delay more. Chunks read while earlier ones are held go on in order,
// so the delay is a latency, not a limit on throughput. It serves until
// the returned function is called; that function closes l and every
// connection, and returns once the proxy's goroutines ended.
//
// Tests run it in a process of its own, the command
// github.com/quotagate/quotagate/internal/redistest/delayproxy: a proxy
// in a test's process waits for the processors that the test's own load
// holds, and the "network" slows down with the load, which a network
// does not.
func ServeDelayed(l net.Listener, addr string, delay time.Duration) (stop func()) {
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		conns = append(conns, cs...)
		return true
	}
	// forward copies src to dst, each chunk delay after it was read.
	forward := func(src, dst net.Conn) {
		defer wg.Done()
		type chunk struct {
			b   []byte
			due time.Time
		}
		ch := make(chan chunk, 1024)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer dst.Close()
			for c := range ch {
				time.Sleep(time.Until(c.due))
				if _, err := dst.Write(c.b); err != nil {
					src.Close()
					for range ch {
					}
					return
				}
			}
		}()
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				ch <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				down.Close()
				continue
			}
			if !track(down, up) {
				down.Close()
				up.Close()
				return
			}
			wg.Add(2)
			go forward(down, up)
			go forward(up, down)
		}
	}()
	return func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// CheckDelayed fails t unless PING through the proxy at addr (see
// [ServeDelayed]) answers PONG, three times, each round trip taking at
// least twice delay.
func CheckDelayed(t testing.TB, addr string, delay time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		start := time.Now()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("+PONG\r\n"))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != "+PONG\r\n" {
			t.Fatalf("PING through the proxy: %q", got)
		}
		if rtt := time.Since(start); rtt < 2*delay {
			t.Errorf("a round trip took %v, less than twice the delay (%v)", rtt, 2*delay)
		}
	}
}
