package metrics_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/nethttp"
)

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

// logLines counts the lines of buf whose text contains every one of subs.
func logLines(buf *syncBuffer, subs ...string) int {
	n := 0
	for _, line := range strings.Split(buf.String(), "\n") {
		all := line != ""
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestScrapeAfterKnownSequence sends a known sequence of requests through
// a real net/http server with the middleware, then scrapes /metrics over
// HTTP and checks every quotagate series exactly.
func TestScrapeAfterKnownSequence(t *testing.T) {
	c := newClock()
	store := newMemoryStore(t, c, 0, 0)
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{Budgets: []string{"api", "shadowed"}})
	var logBuf syncBuffer
	lg := observe.MustLogger(slog.New(slog.NewTextHandler(&logBuf, nil)), observe.LoggerConfig{Lines: 1000, Per: time.Second, Clock: c})
	eng, err := core.New(core.Config{
		Store: store, Clock: c, Observer: observe.Multi(m, lg),
		Budgets: []core.Budget{
			{Name: "api", Quota: 3, Window: time.Minute, Key: headerKey("X-Client"), KeyClass: "client"},
			{Name: "shadowed", Quota: 2, Window: time.Minute, Key: constKey, KeyClass: "global", Shadow: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchEngine("main", eng); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemoryStore("memory", store); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemoryStore("memory", store); err == nil {
		t.Fatal("a store name watched twice was accepted")
	}
	mux := http.NewServeMux()
	mux.Handle("GET /api/items/{id}", nethttp.MustMiddleware(eng, core.Use("api", "shadowed"))(http.HandlerFunc(ok)))
	mux.Handle("GET /metrics", metrics.Handler(reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// Before any request: every series of the configured budgets, at zero.
	want := expected("api", "shadowed")
	want[series("quotagate_breaker_open", "engine", "main")] = 0
	want[series("quotagate_memory_store_entries", "store", "memory")] = 0
	want[series("quotagate_memory_store_evictions_total", "store", "memory")] = 0
	got, _ := scrape(t, srv.URL+"/metrics")
	compare(t, got, want)

	steps := []struct {
		client string
		status int
	}{
		{"alice", 200}, // api 1/3; shadowed 1/2
		{"alice", 200}, // api 2/3; shadowed 2/2 (near limit)
		{"alice", 200}, // api 3/3 (near limit); shadowed would deny
		{"alice", 429}, // api denies; shadowed would deny
		{"alice", 429}, // api denies; shadowed would deny
		{"bob", 200},   // api 1/3 for bob; shadowed would deny
		{"", 400},      // no key (not a credential): denied before the store
	}
	for i, s := range steps {
		var hdr []string
		if s.client != "" {
			hdr = []string{"X-Client", s.client}
		}
		if st := get(t, fmt.Sprintf("%s/api/items/%d", srv.URL, i), hdr...); st != s.status {
			t.Fatalf("request %d: status %d, want %d", i+1, st, s.status)
		}
	}

	set := func(v float64, name string, labels ...string) { want[series(name, labels...)] = v }
	set(4, "quotagate_decisions_total", "budget", "api", "outcome", "allowed")
	set(2, "quotagate_decisions_total", "budget", "api", "outcome", "denied")
	set(1, "quotagate_decisions_total", "budget", "api", "outcome", "no_key")
	set(2, "quotagate_decisions_total", "budget", "shadowed", "outcome", "allowed")
	set(4, "quotagate_decisions_total", "budget", "shadowed", "outcome", "shadow_denied")
	set(1, "quotagate_near_limit_total", "budget", "api")
	set(1, "quotagate_near_limit_total", "budget", "shadowed")
	set(1, "quotagate_budget_errors_total", "budget", "api", "kind", "no_key")
	set(6, "quotagate_store_latency_seconds_count", "result", "ok")
	set(3, "quotagate_memory_store_entries", "store", "memory") // api/alice, api/bob, shadowed/all
	got, _ = scrape(t, srv.URL+"/metrics")
	compare(t, got, want)
	if sum := got[series("quotagate_store_latency_seconds_sum", "result", "ok")]; sum <= 0 {
		t.Errorf("store latency sum %v, want > 0", sum)
	}

	// What was counted was also logged, and no key reached the log.
	logs := logBuf.String()
	for _, tc := range []struct {
		subs []string
		want int
	}{
		{[]string{"event=denied", "reason=rate_limited", "budget=api"}, 2},
		{[]string{"event=denied", "reason=no_key"}, 1},
		{[]string{"event=shadow_denied", "budget=shadowed"}, 4},
		{[]string{"event=near_limit"}, 2},
	} {
		if n := logLines(&logBuf, tc.subs...); n != tc.want {
			t.Errorf("%d log lines with %v, want %d\n%s", n, tc.subs, tc.want, logs)
		}
	}
	if strings.Contains(logs, "alice") || strings.Contains(logs, "bob") {
		t.Errorf("a key reached the log:\n%s", logs)
	}
}

func TestStackedLayersCountRefunds(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	eng := core.MustNew(core.Config{
		Store: newMemoryStore(t, c, 0, 0), Clock: c, Observer: m,
		Budgets: []core.Budget{
			{Name: "global", Quota: 100, Window: time.Minute, Key: constKey},
			{Name: "strict", Quota: 1, Window: time.Minute, Key: constKey},
		},
	})
	outer := nethttp.MustMiddleware(eng, core.Use("global"))
	inner := nethttp.MustMiddleware(eng, core.Use("strict"))
	mux := http.NewServeMux()
	mux.Handle("GET /x", outer(inner(http.HandlerFunc(ok))))
	mux.Handle("GET /metrics", metrics.Handler(reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for i, wantStatus := range []int{200, 429, 429} {
		if st := get(t, srv.URL+"/x"); st != wantStatus {
			t.Fatalf("request %d: status %d, want %d", i+1, st, wantStatus)
		}
	}
	want := expected("global", "strict")
	// global had room three times, but only the first request was let
	// through: the other two were denied by strict, in the inner layer.
	want[series("quotagate_decisions_total", "budget", "global", "outcome", "allowed")] = 1
	want[series("quotagate_decisions_total", "budget", "global", "outcome", "denied_elsewhere")] = 2
	want[series("quotagate_decisions_total", "budget", "strict", "outcome", "allowed")] = 1
	want[series("quotagate_decisions_total", "budget", "strict", "outcome", "denied")] = 2
	want[series("quotagate_near_limit_total", "budget", "strict")] = 1
	want[series("quotagate_refunds_total", "budget", "global")] = 2
	want[series("quotagate_store_latency_seconds_count", "result", "ok")] = 6
	got, _ := scrape(t, srv.URL+"/metrics")
	compare(t, got, want)
}

// TestShadowModeEndToEnd proves, for a shadow budget and for an engine in
// dry-run mode, that every request passes while the metrics and the log
// say exactly how many would have been denied.
func TestShadowModeEndToEnd(t *testing.T) {
	for _, mode := range []string{"shadow budget", "dry run"} {
		t.Run(mode, func(t *testing.T) {
			c := newClock()
			reg := prometheus.NewRegistry()
			m := metrics.MustNew(reg, metrics.Config{})
			var logBuf syncBuffer
			lg := observe.MustLogger(slog.New(slog.NewJSONHandler(&logBuf, nil)), observe.LoggerConfig{Lines: 1000, Per: time.Second, Clock: c, NearLimit: -1})
			eng := core.MustNew(core.Config{
				Store: newMemoryStore(t, c, 0, 0), Clock: c, Observer: observe.Multi(m, lg),
				DryRun: mode == "dry run",
				Budgets: []core.Budget{
					{Name: "per_ip", Quota: 5, Window: time.Minute, Key: clientIPKey, KeyClass: "ip", Shadow: mode == "shadow budget"},
				},
			})
			mux := http.NewServeMux()
			mux.Handle("GET /x", nethttp.MustMiddleware(eng, core.Use("per_ip"))(http.HandlerFunc(ok)))
			mux.Handle("GET /metrics", metrics.Handler(reg))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			for i := range 20 {
				if st := get(t, srv.URL+"/x"); st != 200 {
					t.Fatalf("request %d: status %d; %s must deny nothing", i+1, st, mode)
				}
			}
			want := expected("per_ip")
			want[series("quotagate_decisions_total", "budget", "per_ip", "outcome", "allowed")] = 5
			want[series("quotagate_decisions_total", "budget", "per_ip", "outcome", "shadow_denied")] = 15
			want[series("quotagate_near_limit_total", "budget", "per_ip")] = 2 // requests 4 and 5 of 5
			want[series("quotagate_store_latency_seconds_count", "result", "ok")] = 20
			got, _ := scrape(t, srv.URL+"/metrics")
			compare(t, got, want)
			if n := logLines(&logBuf, `"event":"shadow_denied"`, `"budget":"per_ip"`); n != 15 {
				t.Errorf("%d shadow log lines, want 15", n)
			}
			if n := logLines(&logBuf, `"event":"denied"`); n != 0 {
				t.Errorf("%d denial log lines, want 0", n)
			}
		})
	}
}

func TestFailureModesAndBreaker(t *testing.T) {
	c := newClock()
	mainStore := newMemoryStore(t, c, 0, 0)
	fs := &faultStore{Store: mainStore}
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{Budgets: []string{"open", "closed", "local"}})
	eng := core.MustNew(core.Config{
		Store: fs, Fallback: newMemoryStore(t, c, 0, 0), Clock: c, Observer: m,
		BreakerThreshold: 2, BreakerCooldown: time.Minute,
		Budgets: []core.Budget{
			{Name: "open", Quota: 10, Window: time.Minute, Key: constKey, FailureMode: core.FailOpen},
			{Name: "closed", Quota: 10, Window: time.Minute, Key: constKey, FailureMode: core.FailClosed},
			{Name: "local", Quota: 10, Window: time.Minute, Key: constKey, FailureMode: core.FailLocal},
		},
	})
	if err := m.WatchEngine("main", eng); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, b := range []string{"open", "closed", "local"} {
		mux.Handle("GET /"+b, nethttp.MustMiddleware(eng, core.Use(b))(http.HandlerFunc(ok)))
	}
	mux.Handle("GET /metrics", metrics.Handler(reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	fs.fail(errors.New("connection refused"))
	if st := get(t, srv.URL+"/open"); st != 200 {
		t.Fatalf("fail-open budget: status %d", st)
	}
	fs.fail(fmt.Errorf("take: %w", errTimeout))
	if st := get(t, srv.URL+"/closed"); st != 503 {
		t.Fatalf("fail-closed budget: status %d", st)
	}
	// Two consecutive failures opened the breaker: the store is skipped.
	if st := get(t, srv.URL+"/local"); st != 200 {
		t.Fatalf("fail-local budget: status %d", st)
	}
	want := expected("open", "closed", "local")
	want[series("quotagate_decisions_total", "budget", "open", "outcome", "failed_open")] = 1
	want[series("quotagate_decisions_total", "budget", "closed", "outcome", "failed_closed")] = 1
	want[series("quotagate_decisions_total", "budget", "local", "outcome", "allowed")] = 1
	want[series("quotagate_fallback_total", "budget", "local")] = 1
	want[series("quotagate_store_errors_total", "kind", "error")] = 1
	want[series("quotagate_store_errors_total", "kind", "timeout")] = 1
	want[series("quotagate_store_errors_total", "kind", "breaker_open")] = 1
	want[series("quotagate_store_latency_seconds_count", "result", "error")] = 2 // the skipped call is not timed
	want[series("quotagate_breaker_open", "engine", "main")] = 1
	got, _ := scrape(t, srv.URL+"/metrics")
	compare(t, got, want)

	// The store recovers; after the cooldown a probe closes the breaker.
	fs.fail(nil)
	c.Advance(time.Minute)
	if st := get(t, srv.URL+"/open"); st != 200 {
		t.Fatalf("after recovery: status %d", st)
	}
	want[series("quotagate_decisions_total", "budget", "open", "outcome", "allowed")] = 1
	want[series("quotagate_store_latency_seconds_count", "result", "ok")] = 1
	want[series("quotagate_breaker_open", "engine", "main")] = 0
	got, _ = scrape(t, srv.URL+"/metrics")
	compare(t, got, want)
}

// errTimeout wraps context.DeadlineExceeded as a store client would.
var errTimeout = fmt.Errorf("i/o timeout: %w", contextDeadline())
