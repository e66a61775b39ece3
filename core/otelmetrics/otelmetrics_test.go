package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/otelmetrics"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

type rig struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	prom   *prometheus.Registry
	url    string
}

// newRig serves the quickstart's policy (per_ip on every route, writes on
// POST /items) on a real server, observed by otelmetrics and core/metrics
// at once, behind a handler that starts a span per request.
func newRig(t *testing.T, store core.Store) *rig {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otelObs := otelmetrics.MustNew(mp, otelmetrics.Config{})
	reg := prometheus.NewRegistry()
	promObs := metrics.MustNew(reg, metrics.Config{})
	eng := core.MustNew(core.Config{
		Store:            store,
		Observer:         observe.Multi(otelObs, promObs),
		BreakerThreshold: 2, BreakerCooldown: time.Hour,
		Budgets: []core.Budget{
			{Name: "per_ip", Quota: 60, Window: time.Minute, Key: keyfunc.PeerIP(), KeyClass: "ip"},
			{Name: "writes", Quota: 10, Window: time.Minute, Key: keyfunc.PeerIP(), KeyClass: "ip"},
		},
	})
	for _, w := range []interface {
		WatchEngine(string, *core.Engine) error
	}{otelObs, promObs} {
		if err := w.WatchEngine("main", eng); err != nil {
			t.Fatal(err)
		}
	}
	if ms, ok := store.(*memstore.Store); ok {
		otelObs.WatchMemoryStore("memory", ms)
		promObs.WatchMemoryStore("memory", ms)
	}
	every := nethttp.MustMiddleware(eng, core.Use("per_ip"))
	writes := nethttp.MustMiddleware(eng, core.Use("writes"))
	mux := http.NewServeMux()
	mux.Handle("POST /items", writes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })))
	tracer := tp.Tracer("test")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), r.Method+" "+r.URL.Path)
		defer span.End()
		every(mux).ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return &rig{reader: reader, spans: spans, prom: reg, url: srv.URL}
}

func (g *rig) post(t *testing.T, n int) []int {
	t.Helper()
	var codes []int
	for range n {
		resp, err := http.Post(g.url+"/items", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// series flattens the collected metrics: "name{k=v,...}" → value (a
// histogram's count).
func (g *rig) series(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := g.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelmetrics.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = float64(p.Count)
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func attrs(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// promSeries flattens the Prometheus registry the same way.
func (g *rig) promSeries(t *testing.T) map[string]float64 {
	t.Helper()
	fams, err := g.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			var parts []string
			for _, l := range m.Label {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(parts)
			key := f.GetName() + "{" + strings.Join(parts, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func TestSameMetricsAsPrometheus(t *testing.T) {
	g := newRig(t, memstore.MustNew(memstore.Config{SweepInterval: -1}))
	if codes := g.post(t, 12); codes[9] != 201 || codes[10] != 429 || codes[11] != 429 {
		t.Fatalf("statuses %v", codes)
	}
	got := g.series(t)
	for key, want := range map[string]float64{
		"quotagate_decisions_total{budget=writes,outcome=allowed}":          10,
		"quotagate_decisions_total{budget=writes,outcome=denied}":           2,
		"quotagate_decisions_total{budget=per_ip,outcome=allowed}":          10,
		"quotagate_decisions_total{budget=per_ip,outcome=denied_elsewhere}": 2,
		"quotagate_refunds_total{budget=per_ip}":                            2,
		"quotagate_near_limit_total{budget=writes}":                         3, // the 8th, 9th and 10th
		"quotagate_store_latency_seconds{result=ok}":                        24,
		"quotagate_breaker_open{engine=main}":                               0,
		"quotagate_memory_store_entries{store=memory}":                      2,
		"quotagate_memory_store_evictions_total{store=memory}":              0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	// Every series OTel recorded is one core/metrics exports, with the
	// same value; the Prometheus side has more only where it creates
	// series at zero up front.
	prom := g.promSeries(t)
	for key, v := range got {
		if pv, ok := prom[key]; !ok || pv != v {
			t.Errorf("OTel %s = %v; core/metrics has %v (present %v)", key, v, pv, ok)
		}
	}
	var names, promNames []string
	for key := range got {
		names = append(names, key[:strings.IndexByte(key, '{')])
	}
	fams, _ := g.prom.Gather()
	for _, f := range fams {
		promNames = append(promNames, f.GetName())
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, n := range names {
		if !slices.Contains(promNames, n) {
			t.Errorf("OTel instrument %s is not a core/metrics name (%v)", n, promNames)
		}
	}

	// A span event on each denial, in the span of the denied request.
	var denied int
	for _, s := range g.spans.Ended() {
		for _, e := range s.Events() {
			if e.Name == "quotagate.denied" {
				denied++
				a := attribute.NewSet(e.Attributes...)
				if v, _ := a.Value("quotagate.budget"); v.AsString() != "writes" {
					t.Errorf("denial event attributes %v", e.Attributes)
				}
				if v, _ := a.Value("quotagate.reason"); v.AsString() != "rate_limited" {
					t.Errorf("denial event attributes %v", e.Attributes)
				}
				if v, _ := a.Value("quotagate.retry_after_seconds"); v.AsFloat64() <= 0 {
					t.Errorf("denial event attributes %v", e.Attributes)
				}
			}
		}
	}
	if denied != 2 {
		t.Errorf("%d denial span events, want 2", denied)
	}
}

type brokenStore struct{}

func (brokenStore) Take(context.Context, []core.Item, []core.Outcome) error {
	return errors.New("connection refused")
}
func (brokenStore) Refund(context.Context, []core.Item, []core.Outcome) error { return nil }

func TestStoreErrorsAndBreaker(t *testing.T) {
	g := newRig(t, brokenStore{})
	// Fail-open: every request passes. Two failures open the breaker.
	if codes := g.post(t, 3); !slices.Equal(codes, []int{201, 201, 201}) {
		t.Fatalf("statuses %v", codes)
	}
	got := g.series(t)
	for key, want := range map[string]float64{
		"quotagate_store_errors_total{kind=error}":                     2,
		"quotagate_store_errors_total{kind=breaker_open}":              4, // the 3rd request's two layers
		"quotagate_decisions_total{budget=writes,outcome=failed_open}": 3,
		"quotagate_breaker_open{engine=main}":                          1,
		"quotagate_store_latency_seconds{result=error}":                2,
	} {
		if v := got[key]; v != want {
			t.Errorf("%s = %v, want %v", key, v, want)
		}
	}
	var events []string
	for _, s := range g.spans.Ended() {
		for _, e := range s.Events() {
			if e.Name == "quotagate.store_error" {
				a := attribute.NewSet(e.Attributes...)
				k, _ := a.Value("quotagate.error.kind")
				m, _ := a.Value("exception.message")
				events = append(events, k.AsString()+": "+m.AsString())
			}
		}
	}
	slices.Sort(events)
	// Two layers per request: the first request's two store calls fail,
	// the next two requests' four calls are skipped by the breaker.
	want := []string{
		"breaker_open: quotagate: store circuit breaker is open", "breaker_open: quotagate: store circuit breaker is open",
		"breaker_open: quotagate: store circuit breaker is open", "breaker_open: quotagate: store circuit breaker is open",
		"store_error: quotagate: connection refused", "store_error: quotagate: connection refused",
	}
	if !slices.Equal(events, want) {
		t.Errorf("store error span events:\n%v\nwant\n%v", events, want)
	}
}

func TestNoSpanNoEventAndNoAllocation(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	o := otelmetrics.MustNew(mp, otelmetrics.Config{})
	d := &core.Decision{Allowed: true, Results: []core.Result{{Item: core.Item{Budget: "b", Limit: core.Limit{Quota: 10}}, Outcome: core.Outcome{Allowed: true, Remaining: 5}}}}
	r := &core.Request{Context: trace.ContextWithSpan(context.Background(), trace.SpanFromContext(context.Background()))}
	o.ObserveDecision(r, d, d.Results, time.Microsecond) // creates the budget's series
	if a := testing.AllocsPerRun(200, func() { o.ObserveDecision(r, d, d.Results, time.Microsecond) }); a != 0 {
		t.Errorf("observing an allowed decision allocates %v times", a)
	}
}

func TestOptions(t *testing.T) {
	if _, err := otelmetrics.New(nil, otelmetrics.Config{}); err == nil {
		t.Error("nil provider: no error")
	}
	mp := sdkmetric.NewMeterProvider()
	if _, err := otelmetrics.New(mp, otelmetrics.Config{NearLimit: 2, MaxBudgets: -1}); err == nil || !strings.Contains(err.Error(), "max budgets") || !strings.Contains(err.Error(), "near-limit") {
		t.Errorf("bad options: %v, want both problems", err)
	}
	// Budgets beyond MaxBudgets share "_other".
	reader := sdkmetric.NewManualReader()
	o := otelmetrics.MustNew(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), otelmetrics.Config{MaxBudgets: 1})
	for _, b := range []string{"a", "b", "c"} {
		o.ObserveError(core.KindMissingKey, b, core.ErrNoKey)
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	var seen []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			v, _ := p.Attributes.Value("budget")
			seen = append(seen, v.AsString()+"="+attribute.Int64Value(p.Value).Emit())
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"_other=2", "a=1"}) {
		t.Errorf("budget attributes %v, want a=1 and _other=2", seen)
	}
}

// misconfiguredStore answers as a single-node client on a cluster node.
type misconfiguredStore struct{}

func (misconfiguredStore) Take(context.Context, []core.Item, []core.Outcome) error {
	return fmt.Errorf("MOVED 1234 127.0.0.1:7001: %w", core.ErrMisconfigured)
}
func (misconfiguredStore) Refund(context.Context, []core.Item, []core.Outcome) error { return nil }

// A misconfigured store is counted under its own kind, in both exporters.
func TestStoreMisconfigured(t *testing.T) {
	g := newRig(t, misconfiguredStore{})
	if codes := g.post(t, 1); !slices.Equal(codes, []int{201}) {
		t.Fatalf("statuses %v", codes)
	}
	if v := g.series(t)["quotagate_store_errors_total{kind=misconfigured}"]; v != 2 {
		t.Errorf("misconfigured store errors = %v, want 2 (one per layer)", v)
	}
}

// TestEvictionsAndLeasesAsPrometheus: the eviction and lease series are
// the same in both packages, name, attributes and value.
func TestEvictionsAndLeasesAsPrometheus(t *testing.T) {
	g := &rig{reader: sdkmetric.NewManualReader(), prom: prometheus.NewRegistry()}
	otelObs := otelmetrics.MustNew(sdkmetric.NewMeterProvider(sdkmetric.WithReader(g.reader)), otelmetrics.Config{})
	promObs := metrics.MustNew(g.prom, metrics.Config{})
	for _, o := range []interface {
		memstore.EvictionObserver
		core.LeaseObserver
	}{otelObs, promObs} {
		o.ObserveEviction("public")
		o.ObserveEviction("public")
		o.ObserveLease("hot", core.LeaseTaken, 100)
		o.ObserveLease("hot", core.LeaseTaken, 50)
		o.ObserveLease("hot", core.LeaseReturned, 20)
		o.ObserveLease("hot", core.LeaseExpired, 30)
		o.ObserveLease("hot", core.LeaseStranded, 7)
		o.ObserveLease("hot", core.LeaseServedLocal, 90)
		o.ObserveLease("hot", core.LeaseServedStore, 3)
	}
	got, prom := g.series(t), g.promSeries(t)
	for key, want := range map[string]float64{
		"quotagate_memory_evictions_total{budget=public}":          2,
		"quotagate_leases_total{budget=hot,event=taken}":           2,
		"quotagate_leases_total{budget=hot,event=returned}":        1,
		"quotagate_leases_total{budget=hot,event=expired}":         1,
		"quotagate_lease_units_total{budget=hot,event=taken}":      150,
		"quotagate_lease_units_total{budget=hot,event=returned}":   20,
		"quotagate_lease_units_total{budget=hot,event=expired}":    30,
		"quotagate_lease_units_total{budget=hot,event=stranded}":   7,
		"quotagate_lease_decisions_total{budget=hot,served=local}": 90,
		"quotagate_lease_decisions_total{budget=hot,served=store}": 3,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("OTel %s = %v (present %v), want %v", key, v, ok, want)
		}
		if v, ok := prom[key]; !ok || v != want {
			t.Errorf("core/metrics %s = %v (present %v), want %v", key, v, ok, want)
		}
	}
}
