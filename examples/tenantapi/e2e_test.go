package tenantapi_test

// End-to-end tests: the four mains are built and run as processes, on the
// memory store and on Redis, and driven over real HTTP connections on
// 127.0.0.1. Budgets are one-minute fixed windows aligned to the minute, so
// every test that counts up to a quota first waits for a point in the
// minute that leaves room for its counting (e2e.AwaitWindow) and checks at
// the end that it did not run past it.
//
// Router × store variants run concurrently as subtests started from their
// own goroutines (t.Run without t.Parallel, which go test would otherwise
// limit to GOMAXPROCS at a time), so that they share windows instead of
// waiting for one each.

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }

var routers = []string{"nethttp", "gin", "echo", "fiber"}

// binaries builds the four mains once, in one go build.
func binaries(t *testing.T) map[string]string {
	t.Helper()
	pkgs := make([]string, len(routers))
	for i, r := range routers {
		pkgs[i] = "./" + r
	}
	paths := e2e.BuildAll(t, pkgs...)
	m := map[string]string{}
	for i, r := range routers {
		m[r] = paths[i]
	}
	return m
}

// variant is one router on one store.
type variant struct {
	router string
	redis  bool
}

func (v variant) String() string {
	if v.redis {
		return v.router + "/redis"
	}
	return v.router + "/memory"
}

func variants() []variant {
	var vs []variant
	for _, r := range routers {
		vs = append(vs, variant{r, false}, variant{r, true})
	}
	return vs
}

// concurrently runs fn as a subtest for every item, all at once.
func concurrently[V fmt.Stringer](t *testing.T, items []V, fn func(t *testing.T, v V)) {
	var wg sync.WaitGroup
	for _, v := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(v.String(), func(t *testing.T) { fn(t, v) })
		}()
	}
	wg.Wait()
}

// server is a running example with the checks every response gets.
type server struct {
	*e2e.Process
	redis *e2e.Redis
	ids   *requestIDs
	// inflight bounds the requests a test has in flight to the server, so
	// that a loaded machine does not push Redis calls past the store's
	// deadline (a request then fails open, admitted and maybe uncounted).
	inflight chan struct{}
}

// maxInflight is how many requests a test sends a server at once.
const maxInflight = 8

// storeHeld fails the test if the server logged a store error or an open
// circuit breaker: some requests then failed open, so exact counts prove
// nothing.
func (s *server) storeHeld(t *testing.T) {
	t.Helper()
	if n := strings.Count(s.Stderr(), "event=store_error") + strings.Count(s.Stderr(), "event=breaker_open"); n > 0 {
		t.Errorf("the store failed %d times (requests failed open): the machine is too loaded for exact counts\n%s", n, grep(s.Stderr(), "event=store_error"))
	}
}

// grep returns the lines of text that contain substr.
func grep(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// repeat sends q n times, at most maxInflight at once across the test's
// senders to s, and returns the responses.
func (s *server) repeat(c *e2e.Client, n int, q req) ([]*e2e.Response, error) {
	var (
		mu    sync.Mutex
		out   []*e2e.Response
		first error
		wg    sync.WaitGroup
		next  = make(chan struct{}, n)
	)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range min(n, maxInflight) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				s.inflight <- struct{}{}
				r, err := c.Send(q.method, q.path, q.body, q.header...)
				<-s.inflight
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if r != nil {
					out = append(out, r)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, first
}

// start runs the variant's main (on a Redis of its own when v.redis, or on
// rdb when given) with env, and checks at the end that it stops cleanly on
// SIGTERM and printed nothing but its listening line.
func start(t *testing.T, bins map[string]string, v variant, rdb *e2e.Redis, env ...string) *server {
	t.Helper()
	var args []string
	if v.redis {
		if rdb == nil {
			rdb = e2e.StartRedis(t)
		}
		args = []string{"-redis", rdb.Addr()}
	}
	p := e2e.Start(t, bins[v.router], e2e.Config{
		Args:  args,
		Env:   env,
		Unset: []string{"PUBLIC_RATE_LIMIT", "PUBLIC_RATE_WINDOW", "PORTAL_ZEROLOGIN_RATE_LIMIT", "TRUSTED_PROXIES"},
	})
	s := &server{Process: p, redis: rdb, ids: &requestIDs{seen: map[string]bool{}}, inflight: make(chan struct{}, maxInflight)}
	t.Cleanup(func() {
		p.Stop(t)
		if lines := e2e.Lines(p.Stdout()); len(lines) != 1 || lines[0] != "listening on "+p.Addr {
			t.Errorf("stdout: %q, want exactly the listening line", lines)
		}
	})
	return s
}

// requestIDs collects the request ids of denials, which must be unique.
type requestIDs struct {
	mu   sync.Mutex
	seen map[string]bool
}

var denialBody = regexp.MustCompile(`^\{"error":\{"code":"ERR_RATE_LIMITED","message":"Too many requests\. Please slow down and try again shortly\.","request_id":"([0-9a-f]{16})","details":\{"reason":"rate_limited"\}\}\}$`)

var unauthorizedBody = regexp.MustCompile(`^\{"error":\{"code":"ERR_UNAUTHORIZED","message":"[^"]+","request_id":"[0-9a-f]{16}","details":\{"reason":"unauthenticated"\}\}\}$`)

// check reports what is wrong with a response, whatever its status: a
// rate-limit header field or Retry-After, a denial that is not exactly the
// documented one, a repeated request id.
func (s *server) check(r *e2e.Response) string {
	for name := range r.Header {
		l := strings.ToLower(name)
		if strings.Contains(l, "ratelimit") || strings.Contains(l, "rate-limit") || l == "retry-after" {
			return fmt.Sprintf("response %d carries %s: %v", r.Status, name, r.Header[name])
		}
	}
	if r.Status != 429 {
		return ""
	}
	m := denialBody.FindSubmatch(r.Body)
	if m == nil || r.Header.Get("Content-Type") != "application/json" {
		return fmt.Sprintf("denial is not the documented one: %s", r)
	}
	s.ids.mu.Lock()
	defer s.ids.mu.Unlock()
	if s.ids.seen[string(m[1])] {
		return fmt.Sprintf("request_id %s repeated", m[1])
	}
	s.ids.seen[string(m[1])] = true
	return ""
}

// req is one kind of request.
type req struct {
	method, path, body string
	header             []string
}

func (q req) String() string {
	s := q.method + " " + q.path
	for i := 0; i+1 < len(q.header); i += 2 {
		s += fmt.Sprintf(" [%s: %s]", q.header[i], q.header[i+1])
	}
	return s
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

func get(path, token string) req  { return req{"GET", path, "", bearer(token)} }
func post(path, token string) req { return req{"POST", path, "", bearer(token)} }

// exhaust sends n requests q at once (maxInflight at a time) and expects every one to
// answer want, then one more to be denied: the budget admits exactly n
// before its first 429. It reports a failure with t.Errorf (safe from any
// goroutine) and returns whether the expectation held.
func (s *server) exhaust(t *testing.T, c *e2e.Client, n, want int, q req) bool {
	t.Helper()
	if n > 0 {
		rs, err := s.repeat(c, n, q)
		if err != nil {
			t.Errorf("%v: %v", q, err)
			return false
		}
		if st := e2e.Statuses(rs); st[want] != n {
			t.Errorf("%v: %d requests answered %v, want %d × %d before the first 429", q, n, st, n, want)
			return false
		}
		for _, r := range rs {
			if msg := s.check(r); msg != "" {
				t.Errorf("%v: %s", q, msg)
				return false
			}
		}
	}
	r, err := c.Send(q.method, q.path, q.body, q.header...)
	if err != nil {
		t.Errorf("%v: %v", q, err)
		return false
	}
	if msg := s.check(r); msg != "" || r.Status != 429 {
		t.Errorf("%v: request %d answered %d %s %s, want the 429 denial", q, n+1, r.Status, r.Body, msg)
		return false
	}
	return true
}

// expect sends q once and expects status want.
func (s *server) expect(t *testing.T, c *e2e.Client, want int, q req) (*e2e.Response, bool) {
	t.Helper()
	r, err := c.Send(q.method, q.path, q.body, q.header...)
	if err != nil {
		t.Errorf("%v: %v", q, err)
		return nil, false
	}
	if msg := s.check(r); msg != "" || r.Status != want {
		t.Errorf("%v: %d %s %s, want %d", q, r.Status, r.Body, msg, want)
		return r, false
	}
	return r, true
}

// tiers are the contract's quotas per tenant, worked out by hand:
// reference × the tier's share (small ¼, medium ½, large 1, xl 2, max 4),
// rounded up.
var tiers = []struct {
	tenant, token, tier                    string
	mutate, heavy, values, check, outbound int
}{
	{"acme", "op-acme-alice", "small", 75, 8, 150, 3, 2},
	{"hooli", "op-hooli-hank", "medium", 150, 15, 300, 5, 3},
	{"globex", "op-globex-gina", "large", 300, 30, 600, 10, 5},
	{"initech", "op-initech-ivan", "xl", 600, 60, 1200, 20, 10},
	{"umbrella", "op-umbrella-una", "max", 1200, 120, 2400, 40, 20},
}

// parallel runs fns at once and waits for them.
func parallel(fns ...func()) {
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	wg.Wait()
}

// TestBudgetsPerTier counts, for a tenant of every tier, how many requests
// each of the five per-tenant budgets admits before its first 429, on every
// router and store.
func TestBudgetsPerTier(t *testing.T) {
	bins := binaries(t)
	concurrently(t, variants(), func(t *testing.T, v variant) {
		s := start(t, bins, v, nil)
		c := s.Client(t)
		win := e2e.AwaitWindow(t, time.Minute, 20*time.Second)
		var wg sync.WaitGroup
		for _, tt := range tiers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := fmt.Sprintf("%s (%s)", tt.tenant, tt.tier)
				ok := make([]bool, 4)
				parallel(
					func() { ok[0] = s.exhaust(t, c, tt.heavy, 200, get("/api/reports/x", tt.token)) },
					func() { ok[1] = s.exhaust(t, c, tt.values, 200, get("/api/dashboard/values", tt.token)) },
					func() { ok[2] = s.exhaust(t, c, tt.check, 200, post("/api/checks", tt.token)) },
					func() { ok[3] = s.exhaust(t, c, tt.outbound, 202, post("/api/outbound", tt.token)) },
				)
				if slices.Contains(ok, false) {
					t.Errorf("%s: counts above failed", who)
					return
				}
				// Checks and outbound calls spent t_mutate too (their
				// denials did not); reports and values are GETs, which
				// t_mutate ignores.
				if !s.exhaust(t, c, tt.mutate-tt.check-tt.outbound, 200, post("/api/users/u1/disable", tt.token)) {
					t.Errorf("%s: t_mutate %d = %d checks + %d outbound + %d disables did not hold", who, tt.mutate, tt.check, tt.outbound, tt.mutate-tt.check-tt.outbound)
				}
			}()
		}
		wg.Wait()
		win.Check(t)
		s.storeHeld(t)
	})
}
