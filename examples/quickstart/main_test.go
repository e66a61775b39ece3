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

func TestQuickstartLimits(t *testing.T) {
	store, err := core.NewMemoryStore(core.MemoryConfig{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, h)
	codes := map[int]int{}
	for i := 0; i < 12; i++ {
		resp, err := http.Post(srv+"/items", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if codes[201] != 10 || codes[429] != 2 {
		t.Fatalf("POST /items statuses %v, want 10×201 and 2×429", codes)
	}
	// Denied writes did not spend per_ip: 60 - 10 admitted - this GET = 49.
	resp, err := http.Get(srv + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per_ip";r=49;t=`) || resp.StatusCode != 200 {
		t.Fatalf("GET /hello: %d %q", resp.StatusCode, got)
	}
}

func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return "http://" + ln.Addr().String()
}

// TestQuickstartRuns builds and runs the command as a newcomer would, waits
// for its "listening on" line, sends a request and stops it with SIGTERM.
func TestQuickstartRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "quickstart")
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
	go io.Copy(io.Discard, stdout)
	resp, err := http.Get("http://" + addr + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"per_ip";q=60;w=60` {
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
