package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/nethttp"
)

// A concurrency budget's slots given back when the handler returns are
// not refunds: only the slot an inner layer's denial gave back counts.
func TestConcurrencyReleasesAreNotRefunds(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	eng := core.MustNew(core.Config{
		Store: newMemoryStore(t, c, 0, 0), Clock: c, Observer: m,
		Budgets: []core.Budget{
			{Name: "inflight", Algorithm: core.Concurrency, Quota: 2, Window: time.Minute, Key: constKey},
			{Name: "strict", Quota: 2, Window: time.Minute, Key: constKey},
		},
	})
	outer := nethttp.MustMiddleware(eng, core.Use("inflight"))
	inner := nethttp.MustMiddleware(eng, core.Use("strict"))
	mux := http.NewServeMux()
	mux.Handle("GET /x", outer(inner(http.HandlerFunc(ok))))
	mux.Handle("GET /metrics", metrics.Handler(reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for i, wantStatus := range []int{200, 200, 429} {
		if st := get(t, srv.URL+"/x"); st != wantStatus {
			t.Fatalf("request %d: status %d, want %d", i+1, st, wantStatus)
		}
	}
	want := expected("inflight", "strict")
	want[series("quotagate_decisions_total", "budget", "inflight", "outcome", "allowed")] = 2
	want[series("quotagate_decisions_total", "budget", "inflight", "outcome", "denied_elsewhere")] = 1
	want[series("quotagate_decisions_total", "budget", "strict", "outcome", "allowed")] = 2
	want[series("quotagate_decisions_total", "budget", "strict", "outcome", "denied")] = 1
	want[series("quotagate_near_limit_total", "budget", "inflight")] = 0
	want[series("quotagate_near_limit_total", "budget", "strict")] = 1
	want[series("quotagate_refunds_total", "budget", "inflight")] = 1
	want[series("quotagate_store_latency_seconds_count", "result", "ok")] = 6
	got, _ := scrape(t, srv.URL+"/metrics")
	compare(t, got, want)
}
