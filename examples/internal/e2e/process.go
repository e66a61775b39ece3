package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ListeningPrefix starts the line an example prints on standard output
// once it accepts connections: "listening on 127.0.0.1:8080".
const ListeningPrefix = "listening on "

// Config says how to start an example.
type Config struct {
	// Args are the command-line arguments. When they set no -addr (or
	// --addr), "-addr 127.0.0.1:0" is added so the example listens on a
	// free port.
	Args []string
	// Env holds "NAME=value" entries applied over the test process's
	// environment.
	Env []string
	// Unset names variables removed from the inherited environment.
	Unset []string
	// StartTimeout bounds the wait for the listening line. Default 30s.
	StartTimeout time.Duration
	// Dir is the example's working directory; empty for the test's.
	Dir string
	// Addr, when not empty, is the address the example was told to
	// listen on (in Env or Args), for an example that prints no listening
	// line (examples/tiers reads ADDR): Start then adds no -addr and waits
	// until Addr accepts connections instead of reading a line. Reserve
	// one with [FreeAddr].
	Addr string
}

// Process is a running example.
type Process struct {
	// Addr is the address from the listening line, "127.0.0.1:PORT".
	Addr string

	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stdout *buffer
	stderr *buffer
	done   chan struct{} // closed once the process has exited
	state  *os.ProcessState

	mu     sync.Mutex
	killed bool // ended on purpose with Kill: no exit status check
}

// Start starts the binary bin (from [Build]) as cfg says and waits for its
// listening line, which must be the first line of its standard output. It
// fails the test when the example exits first, prints something else, or
// says nothing within cfg.StartTimeout. When the test ends, a process still
// running is stopped as [Process.Stop] does, and an exit status other than
// 0 fails the test.
func Start(t testing.TB, bin string, cfg Config) *Process {
	t.Helper()
	p := launch(t, bin, cfg, cfg.Addr == "")
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if cfg.Addr != "" {
		if !p.awaitListening(cfg.Addr, timeout) {
			p.kill()
			t.Fatalf("e2e: %s did not accept connections on %s within %v (exited: %v)\nstderr:\n%s", p.name, cfg.Addr, timeout, p.exited(), p.stderr.String())
		}
		p.Addr = cfg.Addr
		p.stopAtCleanup(t)
		return p
	}
	line, ok := p.stdout.firstLine(p.done, timeout)
	if !ok {
		p.kill()
		t.Fatalf("e2e: %s printed no listening line within %v (exited: %v)\nstderr:\n%s", p.name, timeout, p.exited(), p.stderr.String())
	}
	addr, found := strings.CutPrefix(line, ListeningPrefix)
	if !found || addr == "" || strings.ContainsAny(addr, " \t") {
		p.kill()
		t.Fatalf("e2e: %s: first line is %q, want %q followed by the address\nstderr:\n%s", p.name, line, ListeningPrefix+"HOST:PORT", p.stderr.String())
	}
	p.Addr = addr
	p.stopAtCleanup(t)
	return p
}

// stopAtCleanup stops the example when the test ends, as Start documents.
func (p *Process) stopAtCleanup(t testing.TB) {
	t.Cleanup(func() {
		if p.exited() {
			p.checkExit(t)
			return
		}
		p.Stop(t)
	})
}

// awaitListening reports whether addr accepts a connection within timeout
// while the process runs.
func (p *Process) awaitListening(addr string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		if p.exited() {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// FreeAddr returns a loopback address ("127.0.0.1:PORT") that was free a
// moment ago, for an example that must be told its address before it
// starts (see [Config.Addr]).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Result is how a process that ran to completion ended.
type Result struct {
	// Code is the exit status, or -1 when a signal ended the process.
	Code int
	// Stdout and Stderr are everything the process wrote.
	Stdout, Stderr string
}

// Run runs the binary bin as cfg says until it exits, for examples that
// are expected to stop by themselves (an invalid configuration), and
// returns how it ended. It fails the test when the process is still running
// after timeout (and kills it) or cannot be started. Unlike Start it adds
// no -addr.
func Run(t testing.TB, bin string, cfg Config, timeout time.Duration) Result {
	t.Helper()
	p := launch(t, bin, cfg, false)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		t.Fatalf("e2e: %s still running after %v\nstdout:\n%s\nstderr:\n%s", p.name, timeout, p.stdout.String(), p.stderr.String())
	}
	return Result{Code: p.state.ExitCode(), Stdout: p.stdout.String(), Stderr: p.stderr.String()}
}

func launch(t testing.TB, bin string, cfg Config, defaultAddr bool) *Process {
	t.Helper()
	args := cfg.Args
	if defaultAddr && !hasFlag(args, "addr") {
		args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = cfg.Dir
	cmd.Env = environ(cfg.Env, cfg.Unset)
	cmd.SysProcAttr = procAttr()
	p := &Process{
		t:      t,
		name:   fmt.Sprintf("%s %s", bin, strings.Join(args, " ")),
		cmd:    cmd,
		stdout: newBuffer(),
		stderr: newBuffer(),
		done:   make(chan struct{}),
	}
	cmd.Stdout = p.stdout
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("e2e: starting %s: %v", p.name, err)
	}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		p.stdout.close()
		p.stderr.close()
		close(p.done)
	}()
	return p
}

// hasFlag reports whether args set the flag name ("-name", "--name",
// "-name=v").
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue // a value
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// environ returns the test process's environment without unset, with env
// applied over it.
func environ(env, unset []string) []string {
	drop := map[string]bool{}
	for _, n := range unset {
		drop[n] = true
	}
	for _, kv := range env {
		n, _, _ := strings.Cut(kv, "=")
		drop[n] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		n, _, _ := strings.Cut(kv, "=")
		if !drop[n] {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// URL returns the example's URL for path, e.g. "http://127.0.0.1:41234/x".
func (p *Process) URL(path string) string { return "http://" + p.Addr + path }

// Stdout returns what the example has written to standard output so far.
func (p *Process) Stdout() string { return p.stdout.String() }

// Stderr returns what the example has written to standard error so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// WaitStderr waits until the example's standard error contains substr and
// reports whether it did within timeout.
func (p *Process) WaitStderr(substr string, timeout time.Duration) bool {
	return p.stderr.waitFor(substr, timeout)
}

// Signal sends sig to the example.
func (p *Process) Signal(sig os.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM, waits up to 10 seconds for the example to exit, and
// fails the test unless it exited with status 0 (it kills the example if
// it did not exit). Stopping a stopped example only checks its status.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if !p.exited() {
		p.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.kill()
			t.Errorf("e2e: %s did not exit within 10s of SIGTERM\nstderr:\n%s", p.name, p.stderr.String())
			return
		}
	}
	p.checkExit(t)
}

func (p *Process) checkExit(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if killed {
		return
	}
	if code := p.state.ExitCode(); code != 0 {
		t.Errorf("e2e: %s exited with status %d (%v), want 0\nstderr:\n%s", p.name, code, p.state, p.stderr.String())
	}
}

// Kill ends the example with SIGKILL and waits for it; its exit status is
// not checked.
func (p *Process) Kill() { p.kill() }

func (p *Process) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Wait waits up to timeout for the example to exit by itself and returns
// its exit status; ok is false if it is still running.
func (p *Process) Wait(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.state.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// maxOutput caps what is kept of each output stream; beyond it the oldest
// half is dropped.
const maxOutput = 4 << 20

// buffer collects a process's output and lets tests wait for lines and
// substrings in it.
type buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	dropped int
	changed chan struct{} // closed and replaced at every write
	closed  bool
}

func newBuffer() *buffer { return &buffer{changed: make(chan struct{})} }

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Write(p)
	if b.b.Len() > maxOutput {
		half := b.b.Len() / 2
		b.dropped += half
		rest := append([]byte(nil), b.b.Bytes()[half:]...)
		b.b.Reset()
		b.b.Write(rest)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

func (b *buffer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		return fmt.Sprintf("[%d bytes dropped]\n%s", b.dropped, b.b.String())
	}
	return b.b.String()
}

// snapshot returns the contents, whether the stream is closed, and a
// channel closed at the next change.
func (b *buffer) snapshot() (string, bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String(), b.closed, b.changed
}

// firstLine waits for the first complete line; ok is false on timeout or
// when the stream ends without one.
func (b *buffer) firstLine(done <-chan struct{}, timeout time.Duration) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s, closed, changed := b.snapshot()
		if line, _, ok := strings.Cut(s, "\n"); ok {
			return strings.TrimSuffix(line, "\r"), true
		}
		if closed {
			return "", false
		}
		select {
		case <-changed:
		case <-deadline.C:
			return "", false
		}
	}
}

func (b *buffer) waitFor(substr string, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s, closed, changed := b.snapshot()
		if strings.Contains(s, substr) {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// Lines splits output into lines, without a trailing empty line.
func Lines(output string) []string {
	s := bufio.NewScanner(strings.NewReader(output))
	s.Buffer(make([]byte, 64<<10), maxOutput)
	var out []string
	for s.Scan() {
		out = append(out, s.Text())
	}
	return out
}

var _ io.Writer = (*buffer)(nil)
