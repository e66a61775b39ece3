package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }

// TestTiers runs the program as a user would, in a directory holding its
// policy.yaml: quotas by tier, an override, tenants not listed in the free
// tier, and a SIGHUP that moves a tenant to another tier.
func TestTiers(t *testing.T) {
	bin := e2e.Build(t, ".")
	dir := t.TempDir()
	doc, err := os.ReadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(doc string) {
		if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(string(doc))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ADDR="+addr)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(tenant string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET as %q: %v\nserver log:\n%s", tenant, err, logs.String())
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not listen on %s\n%s", addr, logs.String())
		}
	}

	for tenant, want := range map[string]string{
		"acme":     `"api";q=1000;w=60`,
		"globex":   `"api";q=10000;w=60`,
		"initech":  `"api";q=5000;w=60`, // the override
		"unlisted": `"api";q=100;w=60`,  // tier_fallback: free
	} {
		if code, policy := get(tenant); code != http.StatusOK || policy != want {
			t.Errorf("%s: %d, RateLimit-Policy %q; want 200, %q", tenant, code, policy, want)
		}
	}
	if code, _ := get(""); code == http.StatusOK || code == http.StatusTooManyRequests {
		t.Errorf("a request without a tenant got %d; want it refused as unidentified", code)
	}
	// The free tier's 100 a minute is enforced. (The test may straddle a
	// minute boundary, which resets the count: allow for one reset.)
	denied := false
	for range 201 {
		if code, _ := get("small-co"); code == http.StatusTooManyRequests {
			denied = true
			break
		}
	}
	if !denied {
		t.Error("a free tenant was never denied in 201 requests")
	}

	// Move acme to the free tier and reload.
	write(strings.Replace(string(doc), "  acme: pro\n", "  acme: free\n", 1))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, policy := get("acme"); policy == `"api";q=100;w=60` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's quota did not change after SIGHUP\nserver log:\n%s", logs.String())
		}
	}
	// The server logs the reload after it applies it, and the log reaches
	// the test through exec's copying goroutine: on a busy machine it can
	// come after the new quota does.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), "reloaded policy.yaml; error: <nil>"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload in the server's log:\n%s", logs.String())
		}
	}
	// The file is spelled the current way: neither load warns.
	if strings.Contains(logs.String(), "deprecated") {
		t.Errorf("the server warned of a deprecated setting:\n%s", logs.String())
	}
}

// syncBuffer collects the server's log, written by exec's copying
// goroutine while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
