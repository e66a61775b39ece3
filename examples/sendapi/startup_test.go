package sendapi_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestStartup checks each command's start-up and shutdown: invalid flags
// and environment values stop it with a clear error and exit status 2
// before it listens; SIGINT stops it cleanly; TRUSTED_PROXIES takes effect;
// and a Redis that is down at start-up does not keep it from serving.
func TestStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example servers")
	}
	concurrently(t, routers, func(t *testing.T, router string) {
		bin := e2e.Build(t, "./"+router)

		t.Run("invalid", func(t *testing.T) {
			cases := []struct {
				args, env []string
				want      []string // in the error, each
			}{
				{env: []string{"SENDAPI_KEY_SECRET=short"}, want: []string{"SENDAPI_KEY_SECRET", "at least 16"}},
				{env: []string{"SENDAPI_KEY_SECRET="}, want: []string{"SENDAPI_KEY_SECRET"}},
				{env: []string{"TRUSTED_PROXIES=10.0.0.0/33"}, want: []string{"TRUSTED_PROXIES", "10.0.0.0/33"}},
				{env: []string{"TRUSTED_PROXIES=10.0.0.1, proxy.internal"}, want: []string{"TRUSTED_PROXIES", "proxy.internal"}},
				{env: []string{"IDEMPOTENCY_TTL=soon"}, want: []string{"IDEMPOTENCY_TTL", "Go duration"}},
				{env: []string{"IDEMPOTENCY_TTL=-1h"}, want: []string{"IDEMPOTENCY_TTL", "at least 1s"}},
				{env: []string{"IDEMPOTENCY_TTL=0"}, want: []string{"IDEMPOTENCY_TTL"}},
				{env: []string{"REDIS_TIMEOUT=fast"}, want: []string{"REDIS_TIMEOUT", "Go duration"}},
				{env: []string{"REDIS_TIMEOUT=0s"}, want: []string{"REDIS_TIMEOUT", "more than 0"}},
				{env: []string{"REDIS_TIMEOUT=1m"}, want: []string{"REDIS_TIMEOUT", "at most 10s"}},
				{args: []string{"-redis", "redis.internal"}, want: []string{"-redis", "redis.internal"}},
				{args: []string{"-redis", "127.0.0.1:99999"}, want: []string{"-redis", "99999"}},
				{args: []string{"-addr", "nowhere"}, want: []string{"-addr", "nowhere"}},
				{args: []string{"extra"}, want: []string{"unexpected arguments"}},
				// Every problem at once.
				{env: []string{"SENDAPI_KEY_SECRET=x", "TRUSTED_PROXIES=::1/200", "IDEMPOTENCY_TTL=1 day"}, want: []string{"SENDAPI_KEY_SECRET", "TRUSTED_PROXIES", "IDEMPOTENCY_TTL"}},
			}
			for _, tc := range cases {
				args := append([]string{"-addr", "127.0.0.1:0"}, tc.args...)
				if len(tc.args) > 0 && tc.args[0] == "-addr" {
					args = tc.args
				}
				res := e2e.Run(t, bin, e2e.Config{Args: args, Env: tc.env, Unset: hermetic}, 20*time.Second)
				if res.Code != 2 || res.Stdout != "" || !strings.Contains(res.Stderr, "invalid configuration") {
					t.Fatalf("args %q env %q: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, the problem on stderr", tc.args, tc.env, res.Code, res.Stdout, res.Stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(res.Stderr, w) {
						t.Errorf("args %q env %q: stderr %q does not mention %q", tc.args, tc.env, res.Stderr, w)
					}
				}
				if strings.Contains(res.Stderr, "SENDAPI_KEY_SECRET=") {
					t.Errorf("the error repeats the secret's value: %q", res.Stderr)
				}
			}
		})

		t.Run("sigint", func(t *testing.T) {
			p := start(t, bin, nil)
			if out := p.Stdout(); out != "listening on "+p.Addr+"\n" {
				t.Fatalf("stdout %q, want exactly the listening line", out)
			}
			p.Signal(os.Interrupt)
			if code, ok := p.Wait(10 * time.Second); !ok || code != 0 {
				t.Fatalf("after SIGINT: exited %v, status %d; want 0\nstderr:\n%s", ok, code, p.Stderr())
			}
		})

		t.Run("trusted-proxies", func(t *testing.T) {
			// 127.0.0.1 is the proxy: its X-Forwarded-For names the
			// client. 127.0.0.2 is not: its header is ignored.
			p := start(t, bin, []string{"TRUSTED_PROXIES=127.0.0.1/32"})
			proxy, direct := p.Client(t), p.ClientFrom(t, "127.0.0.2")
			reset := func(c *e2e.Client, xff string) call {
				return do(t, c, "POST", "/v1/auth/password-reset", `{"email":"a@example.com"}`, "X-Forwarded-For", xff)
			}
			win := e2e.AwaitWindow(t, time.Minute, 10*time.Second)
			for i := range 10 {
				expect(t, reset(proxy, "198.51.100.1"), http.StatusAccepted, "auth", 10, int64(9-i))
			}
			denied(t, reset(proxy, "198.51.100.1"), "auth", 10)
			// A client prepending an address cannot escape its budget:
			// the proxy appended the real one.
			denied(t, reset(proxy, "203.0.113.9, 198.51.100.1"), "auth", 10)
			expect(t, reset(proxy, "198.51.100.2"), http.StatusAccepted, "auth", 10, 9)
			expect(t, reset(direct, "198.51.100.1"), http.StatusAccepted, "auth", 10, 9)
			expect(t, reset(direct, "198.51.100.3"), http.StatusAccepted, "auth", 10, 8)
			win.Check(t)
		})

		t.Run("redis-down-at-start", func(t *testing.T) {
			port, err := redistest.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			p := start(t, bin, nil, "-redis", "127.0.0.1:"+strconv.Itoa(port))
			if !p.WaitStderr("event=store_unavailable", 5*time.Second) {
				t.Fatalf("no warning about the unreachable Redis; stderr:\n%s", p.Stderr())
			}
			r := do(t, p.Client(t), "POST", "/v1/email/messages", `{"to":"a@example.com"}`, ak(acme1)...)
			if r.Status != http.StatusAccepted {
				t.Fatalf("send with Redis unreachable: %v, want 202 (fail-open)", r.Response)
			}
			failedOpen(t, r, "email_send", 100)
		})
	})
}
