package metrics_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/nethttp"
)

// A server that limits /api and serves its limiter's metrics on /metrics.
func Example() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()

	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	eng := core.MustNew(core.Config{
		Store:    store,
		Observer: m,
		Budgets: []core.Budget{{
			Name: "api", Algorithm: core.TokenBucket, Quota: 2, Window: time.Hour,
			Key: func(*core.Request) (string, error) { return "everyone", nil }, KeyClass: "global",
		}},
	})
	_ = m.WatchEngine("api", eng)
	_ = m.WatchMemoryStore("memory", store)

	mux := http.NewServeMux()
	mux.Handle("GET /api", nethttp.MustMiddleware(eng, core.Use("api"))(http.HandlerFunc(
		func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })))
	mux.Handle("GET /metrics", metrics.Handler(reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL + "/api")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	for _, line := range strings.Split(readAll(resp), "\n") {
		if strings.HasPrefix(line, "quotagate_decisions_total") && !strings.HasSuffix(line, " 0") ||
			strings.HasPrefix(line, "quotagate_memory_store_entries") {
			fmt.Println(line)
		}
	}
	// Output:
	// 200 OK
	// 200 OK
	// 429 Too Many Requests
	// quotagate_decisions_total{budget="api",outcome="allowed"} 2
	// quotagate_decisions_total{budget="api",outcome="denied"} 1
	// quotagate_memory_store_entries{store="memory"} 1
}

// Metrics and logs together: observe.Multi sends every event to both. A
// shadow budget lets everything through while both say what it would have
// denied.
func ExampleNew_withLogs() {
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	quiet := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == "retry_after" {
			return slog.Attr{}
		}
		return a
	}
	lg := observe.MustLogger(slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: quiet})),
		observe.LoggerConfig{NearLimit: -1})
	eng := core.MustNew(core.Config{
		Store:    memstore.MustNew(memstore.Config{}),
		Observer: observe.Multi(m, lg),
		Budgets: []core.Budget{{
			Name: "per_tenant", Algorithm: core.TokenBucket, Quota: 1, Window: time.Hour,
			Key: func(*core.Request) (string, error) { return "t1", nil }, KeyClass: "tenant",
			Shadow: true, // watch before enforcing
		}},
	})
	l := eng.MustLayer(core.Use("per_tenant"))
	for range 2 {
		var d core.Decision
		l.Decide(&core.Request{Method: "POST", Route: "/orders"}, &d)
		fmt.Println("allowed:", d.Allowed)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, s := range f.Metric {
			if f.GetName() == "quotagate_decisions_total" && s.GetCounter().GetValue() > 0 {
				fmt.Println(s.Label[1].GetValue(), s.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// allowed: true
	// level=INFO msg="quotagate: shadow budget would have denied" event=shadow_denied budget=per_tenant key_class=tenant remaining=0 quota=1 window=1h0m0s cost=1 method=POST route=/orders
	// allowed: true
	// allowed 1
	// shadow_denied 1
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
