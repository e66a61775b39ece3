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
func (s *server) storeHeld(t reporter) {
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
	s := startWith(t, bins[v.router], args, env...)
	s.redis = rdb
	return s
}

// storeTimeout is the store deadline the tests give the examples
// (-redis-timeout). The tests run dozens of servers and Redis processes
// at once, on machines that are busy with other work too; a call past the
// deadline fails open (by design), which an exact count then reports as a
// failure of the limiter. storeHeld checks that no call did.
const storeTimeout = "5s"

// startWith runs the main bin with args (and -redis-timeout storeTimeout
// when args name a Redis) and env.
func startWith(t *testing.T, bin string, args []string, env ...string) *server {
	t.Helper()
	if slices.Contains(args, "-redis") {
		args = append(args, "-redis-timeout", storeTimeout)
	}
	p := e2e.Start(t, bin, e2e.Config{
		Args:  args,
		Env:   env,
		Unset: []string{"PUBLIC_RATE_LIMIT", "PUBLIC_RATE_WINDOW", "PORTAL_ZEROLOGIN_RATE_LIMIT", "TRUSTED_PROXIES"},
	})
	s := &server{Process: p, ids: &requestIDs{seen: map[string]bool{}}, inflight: make(chan struct{}, maxInflight)}
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
func (s *server) exhaust(t reporter, c *e2e.Client, n, want int, q req) bool {
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
func (s *server) expect(t reporter, c *e2e.Client, want int, q req) (*e2e.Response, bool) {
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

// reporter is where checks report failures: the test itself, or a
// report that counted keeps until it knows whether the counting stayed in
// its window.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// report collects failures; it is safe for concurrent use.
type report struct {
	mu   sync.Mutex
	msgs []string
}

func (r *report) Helper() {}

func (r *report) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// counted runs fn, which counts requests against one-minute budgets, in a
// window with at least need left: see countedIn.
func counted(t *testing.T, need time.Duration, fn func(r reporter)) {
	t.Helper()
	countedIn(t, time.Minute, need, fn)
}

// countedIn runs fn, which counts requests against budgets of window w, in
// a window with at least need left, and returns the end of the window it
// ran in. If fn's requests ran past the end of that window, its findings
// prove nothing (counts may have been split over two windows): they are
// discarded and fn runs again in a fresh window, at most three times.
// Otherwise what fn reported is reported to t. fn must leave nothing behind
// that a fresh window does not reset.
//
// The first attempts of every test run at once. A retry waits for one of
// retrySlots, so that on a machine too busy for all the counts at once the
// retries share it with fewer others, and finish in time.
func countedIn(t *testing.T, w, need time.Duration, fn func(r reporter)) time.Time {
	t.Helper()
	win := e2e.AwaitWindow(t, w, need)
	for attempt := 1; ; attempt++ {
		if attempt == 2 {
			retrySlots <- struct{}{}
			defer func() { <-retrySlots }()
			win = e2e.AwaitFresh(t, w, need)
		}
		var r report
		fn(&r)
		if !win.Ended() {
			for _, m := range r.msgs {
				t.Error(m)
			}
			return win.End
		}
		if attempt == 3 {
			t.Fatalf("the counting ran past the end of its %v window %d times: the machine is too slow for this test", w, attempt)
		}
		t.Logf("the counting ran past the end of its %v window (%d findings discarded); counting again in a fresh window", w, len(r.msgs))
		if attempt > 1 {
			win = e2e.AwaitFresh(t, w, need)
		}
	}
}

// retrySlots bounds how many counts run again at once (see countedIn).
var retrySlots = make(chan struct{}, 2)

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
		counted(t, 30*time.Second, func(t reporter) {
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
		})
		s.storeHeld(t)
	})
}

func anon(method, path string, header ...string) req { return req{method, path, "", header} }

// sendAll sends q n times and expects every answer to be want.
func (s *server) sendAll(t reporter, c *e2e.Client, n, want int, q req) bool {
	t.Helper()
	rs, err := s.repeat(c, n, q)
	if err != nil {
		t.Errorf("%v: %v", q, err)
		return false
	}
	if st := e2e.Statuses(rs); st[want] != n {
		t.Errorf("%v: %d requests answered %v, want %d × %d", q, n, st, n, want)
		return false
	}
	for _, r := range rs {
		if msg := s.check(r); msg != "" {
			t.Errorf("%v: %s", q, msg)
			return false
		}
	}
	return true
}

// TestRoutes checks, on every router and store, what each route spends.
func TestRoutes(t *testing.T) {
	bins := binaries(t)
	concurrently(t, variants(), func(t *testing.T, v variant) {
		s := start(t, bins, v, nil)
		c := s.Client(t)
		public := publicClients(t, s)
		counted(t, 10*time.Second, func(t reporter) {
			parallel(
				func() { acmeRoutes(t, s, c) },
				func() {
					// An export spends t_heavy and t_mutate (hooli: 15 and
					// 150); an export denied by t_heavy spends neither.
					_ = s.sendAll(t, c, 5, 202, post("/api/exports", "op-hooli-hank")) &&
						s.exhaust(t, c, 10, 200, get("/api/reports/r", "op-hooli-hank")) &&
						s.exhaust(t, c, 0, 0, post("/api/exports", "op-hooli-hank")) &&
						s.exhaust(t, c, 145, 200, post("/api/users/u1/disable", "op-hooli-hank"))
				},
				func() {
					// credential_issue: 5 per (tenant, operator); each also
					// spends t_mutate (globex: 300).
					_ = s.exhaust(t, c, 5, 201, post("/api/credentials", "op-globex-gina")) &&
						s.exhaust(t, c, 295, 200, post("/api/users/u1/disable", "op-globex-gina"))
				},
				func() {
					// A bulk disable of 500 ids spends t_mutate once
					// (initech: 600).
					ids := make([]string, 500)
					for i := range ids {
						ids[i] = fmt.Sprintf(`"u%d"`, i)
					}
					bulk := req{"POST", "/api/users/bulk-disable", `{"ids":[` + strings.Join(ids, ",") + `]}`, bearer("op-initech-ivan")}
					if r, ok := s.expect(t, c, 200, bulk); ok && string(r.Body) != `{"disabled":500,"tenant":"initech"}` {
						t.Errorf("bulk disable answered %s", r.Body)
					}
					bulk.body = `{"ids":["u1"]}`
					_, ok := s.expect(t, c, 200, bulk)
					_ = ok && s.exhaust(t, c, 598, 200, post("/api/users/u1/disable", "op-initech-ivan"))
				},
				func() { unauthorizedChargesNothing(t, s, c) },
				func() { publicEndpoints(t, s, public) },
			)
		})
		s.storeHeld(t)
	})
}

// acmeRoutes runs acme's checks in order: the portal subscribers first,
// then the tenant's budgets, which the portal must not have touched.
func acmeRoutes(t reporter, s *server, c *e2e.Client) {
	// One subscriber's exhaustion: /portal/me and /portal/topup share the
	// subscriber's 60 per minute.
	sub1, sub2 := "sub-acme-1001", "sub-acme-1002"
	if !s.sendAll(t, c, 30, 200, get("/portal/me", sub1)) ||
		!s.exhaust(t, c, 30, 200, post("/portal/topup", sub1)) ||
		!s.exhaust(t, c, 0, 0, get("/portal/me", sub1)) {
		return
	}
	// ... leaves the other subscriber untouched ...
	if !s.exhaust(t, c, 60, 200, get("/portal/me", sub2)) {
		return
	}
	// ... and the tenant: its budgets are all still full.
	alice, bob := "op-acme-alice", "op-acme-bob"
	if !s.exhaust(t, c, 150, 200, get("/api/dashboard/values", alice)) {
		return
	}
	// GET /api/reports/x spends t_heavy (8) and no t_mutate; GET /api/users
	// spends nothing.
	if !s.exhaust(t, c, 8, 200, get("/api/reports/x", alice)) ||
		!s.sendAll(t, c, 20, 200, get("/api/users", alice)) {
		return
	}
	// t_mutate is the tenant's: alice's and bob's writes share 75.
	if !s.sendAll(t, c, 5, 200, post("/api/users/u1/disable", alice)) ||
		!s.exhaust(t, c, 70, 200, post("/api/users/u2/disable", bob)) {
		return
	}
	// card_timeline: 20 per (tenant, operator), charged before the
	// visibility check: cards whose id starts with x answer 404 and count.
	if !s.sendAll(t, c, 10, 404, get("/api/cards/x1/timeline", alice)) ||
		!s.sendAll(t, c, 10, 200, get("/api/cards/c1/timeline", alice)) ||
		!s.exhaust(t, c, 0, 0, get("/api/cards/c2/timeline", alice)) ||
		!s.exhaust(t, c, 0, 0, get("/api/cards/x2/timeline", alice)) {
		return
	}
	s.exhaust(t, c, 20, 404, get("/api/cards/x3/timeline", bob)) // bob has his own 20
}

// unauthorizedChargesNothing sends requests without a valid credential:
// each is answered 401 before any budget is charged, so umbrella's t_check
// (40) is still full afterwards.
func unauthorizedChargesNothing(t reporter, s *server, c *e2e.Client) {
	bad := []req{
		anon("POST", "/api/checks"),
		anon("POST", "/api/checks", "Authorization", "Bearer op-umbrella-eve"),
		anon("POST", "/api/checks", "Authorization", "Basic b3AtdW1icmVsbGEtdW5h"),
		anon("POST", "/api/checks", "Authorization", "Bearer"),
		anon("POST", "/api/checks", "Authorization", "Bearer op-umbrella-una x"),
		anon("POST", "/api/checks", "Authorization", "Bearer sub-acme-1001"),
		anon("POST", "/api/checks", "Authorization", "Bearer op-umbrella-una", "Authorization", "Bearer op-umbrella-una"),
		anon("GET", "/portal/me", "Authorization", "Bearer op-umbrella-una"),
		anon("POST", "/portal/topup"),
	}
	for _, q := range bad {
		rs, err := s.repeat(c, 5, q)
		if err != nil {
			t.Errorf("%v: %v", q, err)
			return
		}
		for _, r := range rs {
			if msg := s.check(r); msg != "" || r.Status != 401 || !unauthorizedBody.Match(r.Body) || r.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%v: %d %s %s, want the 401 error", q, r.Status, r.Body, msg)
				return
			}
		}
	}
	s.exhaust(t, c, 40, 200, post("/api/checks", "op-umbrella-una"))
}

var publicRoutes = []req{
	anon("POST", "/public/login"),
	anon("POST", "/public/signup"),
	anon("GET", "/public/resolve-host"),
	anon("GET", "/public/slug-available"),
	anon("GET", "/public/captcha"),
	anon("POST", "/public/payment-return"),
	anon("POST", "/public/forms"),
}

// publicClients returns the clients publicEndpoints uses, from three
// addresses.
func publicClients(t *testing.T, s *server) [3]*e2e.Client {
	return [3]*e2e.Client{s.ClientFrom(t, "127.0.0.2"), s.ClientFrom(t, "127.0.0.3"), s.ClientFrom(t, "127.0.0.4")}
}

// publicEndpoints checks that each public endpoint has its own budget of
// 20 per client IP, that /portal/zerologin has 120, and that a client that
// connects directly cannot choose its address with X-Forwarded-For.
func publicEndpoints(t reporter, s *server, cs [3]*e2e.Client) {
	one := cs[0]
	for _, q := range publicRoutes {
		if !s.exhaust(t, one, 20, 200, q) {
			return
		}
	}
	if !s.exhaust(t, one, 120, 200, anon("POST", "/portal/zerologin")) {
		return
	}
	// Another address has budgets of its own.
	if !s.exhaust(t, cs[1], 20, 200, publicRoutes[0]) {
		return
	}
	// Forwarding headers from a peer that is not a trusted proxy are
	// ignored (TRUSTED_PROXIES is unset): rotating X-Forwarded-For does
	// not buy more requests.
	three := cs[2]
	for i := range 21 {
		want := 200
		if i == 20 {
			want = 429
		}
		if _, ok := s.expect(t, three, want, anon("POST", "/public/login", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))); !ok {
			return
		}
	}
}

type router string

func (r router) String() string { return string(r) }

func allRouters() []router {
	rs := make([]router, len(routers))
	for i, r := range routers {
		rs[i] = router(r)
	}
	return rs
}

// TestInvalidStartup checks that every main refuses to start, with a
// clear message and a non-zero status, on an invalid environment value or
// flag, and never prints the listening line.
func TestInvalidStartup(t *testing.T) {
	bins := binaries(t)
	cases := []struct {
		env     []string
		args    []string
		message string
	}{
		{env: []string{"PUBLIC_RATE_LIMIT=twenty"}, message: `PUBLIC_RATE_LIMIT="twenty": quota "twenty" is not a whole number`},
		{env: []string{"PUBLIC_RATE_LIMIT=0"}, message: `PUBLIC_RATE_LIMIT="0": quota 0 is below 1`},
		{env: []string{"PUBLIC_RATE_LIMIT=-20"}, message: `PUBLIC_RATE_LIMIT="-20": quota -20 is below 1`},
		{env: []string{"PUBLIC_RATE_LIMIT="}, message: `PUBLIC_RATE_LIMIT="": is set but empty`},
		{env: []string{"PUBLIC_RATE_WINDOW=60"}, message: `PUBLIC_RATE_WINDOW="60": window "60" is not a duration`},
		{env: []string{"PUBLIC_RATE_WINDOW=a minute"}, message: `PUBLIC_RATE_WINDOW="a minute": window "a minute" is not a duration`},
		{env: []string{"PUBLIC_RATE_WINDOW=-1m"}, message: `PUBLIC_RATE_WINDOW="-1m": window -1m0s is not positive`},
		{env: []string{"PORTAL_ZEROLOGIN_RATE_LIMIT=lots"}, message: `PORTAL_ZEROLOGIN_RATE_LIMIT="lots": quota "lots" is not a whole number`},
		{env: []string{"PORTAL_ZEROLOGIN_RATE_LIMIT=0"}, message: `PORTAL_ZEROLOGIN_RATE_LIMIT="0": quota 0 is below 1`},
		{env: []string{"TRUSTED_PROXIES=10.0.0.0/33"}, message: `TRUSTED_PROXIES="10.0.0.0/33": keyfunc: trusted proxy "10.0.0.0/33" is not a CIDR prefix`},
		{env: []string{"TRUSTED_PROXIES=10.0.0.0/8,proxy.local"}, message: `TRUSTED_PROXIES="10.0.0.0/8,proxy.local": keyfunc: trusted proxy "proxy.local" is not a CIDR prefix`},
		{env: []string{"TRUSTED_PROXIES=10.0.0.0/8,"}, message: `TRUSTED_PROXIES="10.0.0.0/8,": entry 2 is empty`},
		{args: []string{"-redis", "localhost"}, message: `-redis "localhost": not host:port`},
		{args: []string{"-redis", "redis://:s3cret@127.0.0.1:1/x"}, message: `-redis "redis://xxxxx@127.0.0.1:1/x"`},
		{args: []string{"-redis-timeout", "0s"}, message: `-redis-timeout 0s: must be more than 0`},
		{args: []string{"-redis-timeout", "1m"}, message: `at most 10s`},
		{args: []string{"-addr", "127.0.0.1:0", "extra"}, message: `unexpected arguments ["extra"]`},
		{args: []string{"-port", "8080"}, message: `flag provided but not defined: -port`},
	}
	concurrently(t, allRouters(), func(t *testing.T, r router) {
		for _, c := range cases {
			res := e2e.Run(t, bins[string(r)], e2e.Config{Args: c.args, Env: c.env}, 30*time.Second)
			if res.Code == 0 || res.Stdout != "" || !strings.Contains(res.Stderr, c.message) {
				t.Errorf("env %q args %q: status %d, stdout %q, stderr %q; want a non-zero status, no output and %q",
					c.env, c.args, res.Code, res.Stdout, res.Stderr, c.message)
			}
		}
	})
}

// TestEnvironmentOverrides runs every main with PUBLIC_RATE_LIMIT=3,
// PUBLIC_RATE_WINDOW=4s, PORTAL_ZEROLOGIN_RATE_LIMIT=4 and
// TRUSTED_PROXIES naming 127.0.0.1, on both stores.
func TestEnvironmentOverrides(t *testing.T) {
	bins := binaries(t)
	concurrently(t, variants(), func(t *testing.T, v variant) {
		s := start(t, bins, v, nil,
			"PUBLIC_RATE_LIMIT=3", "PUBLIC_RATE_WINDOW=4s", "PORTAL_ZEROLOGIN_RATE_LIMIT=4",
			"TRUSTED_PROXIES=127.0.0.1/32, 10.0.0.0/8")
		proxy := s.Client(t) // 127.0.0.1, a trusted proxy
		direct, other, zero := s.ClientFrom(t, "127.0.0.6"), s.ClientFrom(t, "127.0.0.7"), s.ClientFrom(t, "127.0.0.8")
		login := func(xff string) req { return anon("POST", "/public/login", "X-Forwarded-For", xff) }
		const w = 4 * time.Second
		end := countedIn(t, w, 2500*time.Millisecond, func(t reporter) {
			// Through the trusted proxy, the client is the right-most
			// address the proxy did not add itself; what a client
			// prepends is ignored.
			for i := range 3 {
				if _, ok := s.expect(t, proxy, 200, login(fmt.Sprintf("192.0.2.%d, 203.0.113.7", i))); !ok {
					return
				}
			}
			_ = s.exhaust(t, proxy, 0, 0, login("203.0.113.7")) &&
				s.exhaust(t, proxy, 3, 200, login("203.0.113.8")) &&
				// A peer outside TRUSTED_PROXIES is its own client,
				// whatever it forwards.
				s.exhaust(t, direct, 3, 200, login("203.0.113.9")) &&
				s.exhaust(t, direct, 0, 0, login("203.0.113.10")) &&
				// A chain from the trusted proxy that cannot be parsed has
				// no client IP: such requests share one budget per
				// endpoint.
				s.exhaust(t, proxy, 3, 200, login("not-an-address")) &&
				s.exhaust(t, proxy, 0, 0, login("neither, is this")) &&
				// Every public endpoint has the overridden quota.
				s.exhaust(t, other, 3, 200, anon("GET", "/public/captcha"))
		})
		// The window is 4 s: the next one admits the same clients again.
		time.Sleep(time.Until(end))
		countedIn(t, w, 2500*time.Millisecond, func(t reporter) {
			_ = s.exhaust(t, other, 3, 200, anon("GET", "/public/captcha")) &&
				s.exhaust(t, proxy, 3, 200, login("203.0.113.7"))
		})
		// PORTAL_ZEROLOGIN_RATE_LIMIT is per minute.
		countedIn(t, time.Minute, 2*time.Second, func(t reporter) {
			s.exhaust(t, zero, 4, 200, anon("POST", "/portal/zerologin"))
		})
		s.storeHeld(t)
	})
}

// TestSharedRedis runs two instances of each main on one Redis and sends
// every budget more than its quota, alternating between the instances:
// together they admit exactly the quota.
func TestSharedRedis(t *testing.T) {
	bins := binaries(t)
	type sharedCase struct {
		q      req
		from   string
		quota  int
		ok     int
		ca, cb *e2e.Client
	}
	concurrently(t, allRouters(), func(t *testing.T, r router) {
		rdb := e2e.StartRedis(t)
		v := variant{string(r), true}
		a, b := start(t, bins, v, rdb), start(t, bins, v, rdb)
		b.ids = a.ids // request ids are unique across instances too
		const extra = 6
		cases := []sharedCase{
			{q: get("/api/dashboard/values", "op-acme-alice"), quota: 150, ok: 200}, // t_values, small
			{q: post("/api/users/u1/disable", "op-acme-bob"), quota: 75, ok: 200},   // t_mutate, small
			{q: get("/api/reports/x", "op-hooli-hank"), quota: 15, ok: 200},         // t_heavy, medium
			{q: post("/api/credentials", "op-hooli-hank"), quota: 5, ok: 201},       // credential_issue (and 5 of hooli's 150 t_mutate)
			{q: post("/api/checks", "op-globex-gina"), quota: 10, ok: 200},          // t_check, large
			{q: post("/api/outbound", "op-initech-ivan"), quota: 10, ok: 202},       // t_outbound, xl
			{q: get("/api/cards/c1/timeline", "op-acme-alice"), quota: 20, ok: 200}, // card_timeline
			{q: get("/portal/me", "sub-acme-1001"), quota: 60, ok: 200},             // portal
			{q: anon("POST", "/portal/zerologin"), from: "127.0.0.3", quota: 120, ok: 200},
		}
		for _, q := range publicRoutes {
			cases = append(cases, sharedCase{q: q, from: "127.0.0.2", quota: 20, ok: 200})
		}
		for i := range cases {
			cases[i].ca, cases[i].cb = a.ClientFrom(t, cases[i].from), b.ClientFrom(t, cases[i].from)
		}
		counted(t, 8*time.Second, func(t reporter) {
			var wg sync.WaitGroup
			for _, c := range cases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var ra, rb []*e2e.Response
					var ea, eb error
					n := c.quota + extra
					parallel(
						func() { ra, ea = a.repeat(c.ca, n/2, c.q) },
						func() { rb, eb = b.repeat(c.cb, n-n/2, c.q) },
					)
					if ea != nil || eb != nil {
						t.Errorf("%v: %v %v", c.q, ea, eb)
						return
					}
					all := append(ra, rb...)
					for _, r := range all {
						if msg := a.check(r); msg != "" {
							t.Errorf("%v: %s", c.q, msg)
							return
						}
					}
					st := e2e.Statuses(all)
					if st[c.ok] != c.quota || st[429] != extra {
						t.Errorf("%v: two instances answered %v (A %v, B %v), want %d × %d and %d × 429",
							c.q, st, e2e.Statuses(ra), e2e.Statuses(rb), c.quota, c.ok, extra)
					}
				}()
			}
			wg.Wait()
		})
		a.storeHeld(t)
		b.storeHeld(t)
	})
}

// TestFailOpen kills Redis under each main: requests pass and the server
// logs the store error; when Redis is back, limiting resumes.
func TestFailOpen(t *testing.T) {
	bins := binaries(t)
	concurrently(t, allRouters(), func(t *testing.T, r router) {
		rdb := e2e.StartRedis(t)
		s := start(t, bins, variant{string(r), true}, rdb)
		c, probe := s.Client(t), s.ClientFrom(t, "127.0.0.9")
		check := post("/api/checks", "op-acme-alice") // t_check: 3 for acme
		counted(t, 10*time.Second, func(rep reporter) {
			if !s.exhaust(rep, c, 3, 200, check) {
				return
			}
			logged := strings.Count(s.Stderr(), "event=store_error")
			rdb.Kill()
			// acme's t_check is exhausted, but the store is gone: the
			// requests fail open.
			if !s.sendAll(rep, c, 10, 200, check) {
				return
			}
			if !waitFor(func() bool { return strings.Count(s.Stderr(), "event=store_error") > logged }, 5*time.Second) {
				rep.Errorf("no store error logged while Redis was down; stderr:\n%s", s.Stderr())
				return
			}
			rdb.Restart() // empty: every count starts again
			// Wait until the limiter writes to Redis again (the circuit
			// breaker probes it within a second), with a budget the checks
			// below do not touch.
			if !waitFor(func() bool {
				_, _ = probe.Send("GET", "/public/captcha", "")
				return rdb.CLI("DBSIZE") != "0"
			}, 10*time.Second) {
				rep.Errorf("the limiter did not use Redis again within 10s of its restart; stderr:\n%s", s.Stderr())
				return
			}
			logged = strings.Count(s.Stderr(), "event=store_error")
			s.exhaust(rep, c, 3, 200, check)
			if n := strings.Count(s.Stderr(), "event=store_error"); n != logged {
				rep.Errorf("%d store errors after Redis answered again:\n%s", n-logged, grep(s.Stderr(), "event=store_error"))
			}
		})
	})
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(cond func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// TestInterrupt checks that SIGINT, like SIGTERM (which every other test
// stops its servers with), shuts each main down with status 0.
func TestInterrupt(t *testing.T) {
	bins := binaries(t)
	concurrently(t, variants(), func(t *testing.T, v variant) {
		s := start(t, bins, v, nil)
		if _, ok := s.expect(t, s.Client(t), 200, get("/api/users", "op-acme-alice")); !ok {
			return
		}
		s.Signal(os.Interrupt)
		if code, ok := s.Wait(10 * time.Second); !ok || code != 0 {
			t.Errorf("after SIGINT: exited %v with status %d, want 0\nstderr:\n%s", ok, code, s.Stderr())
		}
	})
}
