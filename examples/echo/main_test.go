package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// TestLimits checks the example's budgets over real connections: 10 of 12
// writes pass, the denied ones carry Retry-After and spend nothing of the
// per-IP budget.
func TestLimits(t *testing.T) {
	store, err := core.NewMemoryStore(core.MemoryConfig{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e, err := newServer(store)
	if err != nil {
		t.Fatal(err)
	}
	base := listenAndServe(t, e)
	// The budgets count in one-minute fixed windows: run inside one.
	start := awaitWindow(t, 5*time.Second)
	codes := map[int]int{}
	for i := 0; i < 12; i++ {
		resp, err := http.Post(base+"/items", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if codes[http.StatusCreated] != 10 || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("POST /items statuses %v, want 10×201 and 2×429", codes)
	}
	// Denied writes did not spend per_ip: 60 - 10 admitted - this GET = 49.
	resp, err := http.Get(base + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per_ip";r=49;t=`) || resp.StatusCode != http.StatusOK || string(body) != `{"hello":"world"}`+"\n" {
		t.Fatalf("GET /hello: %d %q %q", resp.StatusCode, got, body)
	}
	if start.Truncate(time.Minute) != time.Now().Truncate(time.Minute) {
		t.Fatal("the test crossed a minute boundary; its counts do not apply")
	}
}

// awaitWindow waits, when less than need is left of the current minute,
// for the next one to start, and returns the time it starts counting.
func awaitWindow(t *testing.T, need time.Duration) time.Time {
	t.Helper()
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < need {
		t.Logf("waiting %v for the next minute", left)
		time.Sleep(left + 10*time.Millisecond)
	}
	return time.Now()
}

// TestRuns builds and runs the command as a newcomer would, waits for its
// "listening on" line, sends a request and stops it with SIGTERM.
func TestRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "listening on 127.0.0.1:") {
		t.Fatalf("first line %q", lines.Text())
	}
	addr := strings.TrimPrefix(lines.Text(), "listening on ")
	var rest []string
	for i := 0; i < 4 && lines.Scan(); i++ {
		rest = append(rest, lines.Text())
	}
	go io.Copy(io.Discard, stdout)
	if len(rest) != 4 || !strings.Contains(rest[1], "curl -i http://"+addr+"/hello") || !strings.Contains(rest[2], "-X POST http://"+addr+"/items") {
		t.Errorf("curl lines %q", rest)
	}
	resp, err := http.Get("http://" + addr + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") != `"per_ip";q=60;w=60` {
		t.Fatalf("GET /hello: %d %v", resp.StatusCode, resp.Header)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit after SIGTERM")
	}
}

// listenAndServe serves h on a free 127.0.0.1 port until the test ends.
func listenAndServe(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return "http://" + ln.Addr().String()
}
