package nethttp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// member is one parsed RateLimit or RateLimit-Policy list member.
type member struct {
	name   string
	params map[string]int64
}

// parseSF parses a RateLimit / RateLimit-Policy field with an RFC 9651
// parser and checks the types the draft requires.
func parseSF(t *testing.T, values []string) []member {
	t.Helper()
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%q is not a structured-field list: %v", values, err)
	}
	var out []member
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("member %v is not an item", m)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("member name %v is not an sf-string", item.Value)
		}
		mb := member{name: name, params: map[string]int64{}}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("parameter %s=%v is not an integer", k, v)
			}
			mb.params[k] = n
		}
		out = append(out, mb)
	}
	return out
}

type fixture struct {
	t      *testing.T
	clock  *manualClock
	engine *core.Engine
	srv    *httptest.Server
	hits   atomic.Int64
}

type manualClock struct{ now atomic.Int64 }

func (c *manualClock) Now() time.Time          { return time.UnixMicro(c.now.Load()).UTC() }
func (c *manualClock) Set(t time.Time)         { c.now.Store(t.UnixMicro()) }
func (c *manualClock) Advance(d time.Duration) { c.now.Add(d.Microseconds()) }

var t0 = time.Date(2026, 11, 30, 12, 0, 19, 0, time.UTC)

func newFixture(t *testing.T, budgets []core.Budget, routes func(f *fixture, mux *http.ServeMux)) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: &manualClock{}}
	f.clock.Set(t0)
	s, err := memstore.New(memstore.Config{Clock: f.clock, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	f.engine, err = core.New(core.Config{Store: s, Budgets: budgets, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	routes(f, mux)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) ok() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	})
}

func (f *fixture) do(method, path string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

func remaining(t *testing.T, resp *http.Response, budget string) (int64, bool) {
	t.Helper()
	for _, m := range parseSF(t, resp.Header.Values("RateLimit")) {
		if m.name == budget {
			return m.params["r"], true
		}
	}
	return 0, false
}

func budgets() []core.Budget {
	return []core.Budget{
		{Name: "per_ip", Quota: 5, Window: time.Minute, Key: keyfunc.PeerIP()},
		{Name: "writes", Quota: 2, Window: time.Minute, Key: keyfunc.PeerIP(), IgnoreMethods: []string{"GET", "HEAD", "OPTIONS"}},
	}
}

func TestHeadersParseAsStructuredFields(t *testing.T) {
	f := newFixture(t, budgets(), func(f *fixture, mux *http.ServeMux) {
		mux.Handle("/items", nethttp.MustMiddleware(f.engine, core.Use("per_ip", "writes"))(f.ok()))
	})
	resp := f.do("POST", "/items")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	pol := parseSF(t, resp.Header.Values("RateLimit-Policy"))
	if len(pol) != 2 || pol[0].name != "per_ip" || pol[0].params["q"] != 5 || pol[0].params["w"] != 60 ||
		pol[1].name != "writes" || pol[1].params["q"] != 2 || pol[1].params["w"] != 60 {
		t.Fatalf("RateLimit-Policy %+v", pol)
	}
	rl := parseSF(t, resp.Header.Values("RateLimit"))
	// t0 is 19 s past the minute: 41 s to the window's end.
	if len(rl) != 2 || rl[0].params["r"] != 4 || rl[0].params["t"] != 41 || rl[1].params["r"] != 1 || rl[1].params["t"] != 41 {
		t.Fatalf("RateLimit %+v", rl)
	}
}

func TestDenialIs429WithRetryAfterAndProblem(t *testing.T) {
	f := newFixture(t, budgets(), func(f *fixture, mux *http.ServeMux) {
		mux.Handle("/items", nethttp.MustMiddleware(f.engine, core.Use("per_ip", "writes"))(f.ok()))
	})
	f.do("POST", "/items")
	f.do("POST", "/items")
	f.clock.Advance(500 * time.Millisecond)
	resp := f.do("POST", "/items")
	if resp.StatusCode != 429 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// 40.5 s to the window's end, rounded up.
	if got := resp.Header.Get("Retry-After"); got != "41" {
		t.Fatalf("Retry-After %q, want 41", got)
	}
	if r, _ := remaining(t, resp, "writes"); r != 0 {
		t.Fatalf("writes r=%d on denial", r)
	}
	for _, m := range parseSF(t, resp.Header.Values("RateLimit")) {
		ra, _ := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
		if m.name == "writes" && m.params["t"] > ra {
			t.Fatalf("Retry-After %d earlier than t=%d", ra, m.params["t"])
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q", ct)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatal("denial is cacheable")
	}
	var p core.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Status != 429 || p.Type != core.ProblemQuotaExceeded || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "writes" || p.RetryAfter != 41 {
		t.Fatalf("problem %+v", p)
	}
	if f.hits.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", f.hits.Load())
	}
	// per_ip was not charged by the denied request.
	if r, _ := remaining(t, f.do("GET", "/items"), "per_ip"); r != 2 {
		t.Fatalf("per_ip r=%d, want 2 (5 - 2 POSTs - this GET)", r)
	}
}

func TestGetPassesThroughWriteBudget(t *testing.T) {
	f := newFixture(t, budgets(), func(f *fixture, mux *http.ServeMux) {
		mux.Handle("/items", nethttp.MustMiddleware(f.engine, core.Use("per_ip", "writes"))(f.ok()))
	})
	for i := 0; i < 3; i++ {
		resp := f.do("GET", "/items")
		if _, ok := remaining(t, resp, "writes"); ok {
			t.Fatalf("GET reports the writes budget: %q", resp.Header.Values("RateLimit"))
		}
		for _, m := range parseSF(t, resp.Header.Values("RateLimit-Policy")) {
			if m.name == "writes" {
				t.Fatal("GET lists the writes policy")
			}
		}
	}
	if r, _ := remaining(t, f.do("POST", "/items"), "writes"); r != 1 {
		t.Fatalf("writes r=%d after 3 GETs and a POST, want 1", r)
	}
}

func TestStackedLayersRefundOuterCharge(t *testing.T) {
	f := newFixture(t, []core.Budget{
		{Name: "group", Quota: 10, Window: time.Minute, Key: keyfunc.PeerIP()},
		{Name: "route", Quota: 1, Window: time.Minute, Key: keyfunc.PeerIP()},
	}, func(f *fixture, mux *http.ServeMux) {
		group := nethttp.MustMiddleware(f.engine, core.Use("group"))
		route := nethttp.MustMiddleware(f.engine, core.Use("route"))
		mux.Handle("/api/limited", group(route(f.ok())))
		mux.Handle("/api/other", group(f.ok()))
	})
	resp := f.do("POST", "/api/limited")
	rl := parseSF(t, resp.Header.Values("RateLimit"))
	if resp.StatusCode != 200 || len(rl) != 2 || rl[0].name != "group" || rl[1].name != "route" {
		t.Fatalf("first: %d %+v", resp.StatusCode, rl)
	}
	for i := 0; i < 3; i++ {
		resp = f.do("POST", "/api/limited")
		if resp.StatusCode != 429 {
			t.Fatalf("denied request %d: status %d", i, resp.StatusCode)
		}
		if r, _ := remaining(t, resp, "group"); r != 9 {
			t.Fatalf("group r=%d on inner denial %d, want 9 (refunded)", r, i)
		}
	}
	if r, _ := remaining(t, f.do("GET", "/api/other"), "group"); r != 8 {
		t.Fatalf("group r=%d, want 8: the denied requests must not have spent it", r)
	}
	if f.hits.Load() != 2 {
		t.Fatalf("handler ran %d times", f.hits.Load())
	}
}

func TestRouteCostAndReplacedDenial(t *testing.T) {
	f := newFixture(t, budgets(), func(f *fixture, mux *http.ServeMux) {
		deny := func(r *core.Request, d *core.Decision) core.Denial {
			return core.Denial{Status: 429, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"error":"slow down"}`)}
		}
		mux.Handle("POST /bulk", nethttp.MustMiddleware(f.engine, core.Use("per_ip"), core.Cost(3), core.Deny(deny))(f.ok()))
	})
	if r, _ := remaining(t, f.do("POST", "/bulk"), "per_ip"); r != 2 {
		t.Fatalf("per_ip r=%d after a cost-3 request, want 2", r)
	}
	resp := f.do("POST", "/bulk")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || string(body) != `{"error":"slow down"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replaced denial: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

func TestRouteIsTheMuxPattern(t *testing.T) {
	var seen atomic.Value
	byRoute := func(r *core.Request) (string, error) {
		seen.Store(r.Route)
		return r.Route, nil
	}
	f := newFixture(t, []core.Budget{{Name: "route", Quota: 100, Window: time.Minute, Key: byRoute}}, func(f *fixture, mux *http.ServeMux) {
		mux.Handle("GET /users/{id}", nethttp.MustMiddleware(f.engine, core.Use("route"))(f.ok()))
	})
	f.do("GET", "/users/42")
	f.do("GET", "/users/43")
	if got := seen.Load(); got != "/users/{id}" {
		t.Fatalf("route %q", got)
	}
	if r, _ := remaining(t, f.do("GET", "/users/44"), "route"); r != 97 {
		t.Fatalf("three paths of one route share a budget: r=%d", r)
	}
}

func TestDecisionFromContext(t *testing.T) {
	var got int64 = -1
	f := newFixture(t, budgets(), func(f *fixture, mux *http.ServeMux) {
		mux.Handle("/", nethttp.MustMiddleware(f.engine, core.Use("per_ip"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d := nethttp.DecisionFrom(r.Context()); d != nil && len(d.Results) == 1 {
				got = d.Results[0].Remaining
			}
		})))
	})
	f.do("GET", "/")
	if got != 4 {
		t.Fatalf("handler saw remaining %d", got)
	}
}

func TestMiddlewareConfigErrors(t *testing.T) {
	s, _ := memstore.New(memstore.Config{SweepInterval: -1})
	e := core.MustNew(core.Config{Store: s, Budgets: budgets()})
	if _, err := nethttp.Middleware(e, core.Use("nope")); err == nil || !strings.Contains(err.Error(), `unknown budget "nope"`) {
		t.Fatalf("unknown budget: %v", err)
	}
	if _, err := nethttp.Middleware(e, core.Use("writes"), core.Cost(3)); err == nil || !strings.Contains(err.Error(), `budget "writes": cost 3 exceeds`) {
		t.Fatalf("static cost too large: %v", err)
	}
}

// A timeout middleware between two layers serves the inner layer on another
// goroutine, which keeps running after the outer layer returned: the shared
// state must outlive the outer layer (run with -race).
func TestTimeoutBetweenLayers(t *testing.T) {
	release := make(chan struct{})
	done := make(chan struct{})
	f := newFixture(t, []core.Budget{
		{Name: "outer", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP()},
		{Name: "inner", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP()},
	}, func(f *fixture, mux *http.ServeMux) {
		outer := nethttp.MustMiddleware(f.engine, core.Use("outer"))
		inner := nethttp.MustMiddleware(f.engine, core.Use("inner"))
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			if d := nethttp.DecisionFrom(r.Context()); d == nil || len(d.Results) != 2 {
				t.Errorf("inner handler lost the decision after the outer layer returned: %+v", d)
			}
			close(done)
		})
		mux.Handle("/", outer(http.TimeoutHandler(inner(slow), 20*time.Millisecond, "timeout")))
	})
	if resp := f.do("GET", "/"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want the timeout handler's 503", resp.StatusCode)
	}
	// The outer layer has returned; other requests reuse pooled state now.
	for i := 0; i < 20; i++ {
		f.do("GET", "/other")
	}
	close(release)
	<-done
}

func TestStackedLayersWithAnotherHeaderStyle(t *testing.T) {
	f := newFixture(t, budgets(), func(f *fixture, mux *http.ServeMux) {
		outer := nethttp.MustMiddleware(f.engine, core.Use("per_ip"))
		inner := nethttp.MustMiddleware(f.engine, core.Use("writes"), core.Headers(core.HeadersDraft))
		mux.Handle("/", outer(inner(f.ok())))
	})
	resp := f.do("POST", "/")
	if resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("RateLimit") != "" {
		t.Fatalf("stale IETF fields next to the inner layer's: %v", resp.Header)
	}
	// The inner layer reports the budget closest to exhaustion of both.
	if resp.Header.Get("RateLimit-Limit") != "2" || resp.Header.Get("RateLimit-Remaining") != "1" {
		t.Fatalf("draft fields %v", resp.Header)
	}
}
