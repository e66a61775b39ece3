package metrics_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/metrics"
)

// TestCardinalityBoundedAfter100kKeys drives 100,000 distinct keys through
// the engine and checks that the number of series does not move and that
// no key became a label value.
func TestCardinalityBoundedAfter100kKeys(t *testing.T) {
	const keys = 100_000
	c := newClock()
	store := newMemoryStore(t, c, 4096, 16)
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{Budgets: []string{"per_ip", "shadow_ip"}})
	eng := core.MustNew(core.Config{
		Store: store, Clock: c, Observer: m,
		Budgets: []core.Budget{
			{Name: "per_ip", Quota: 10, Window: time.Minute, Key: remoteAddrKey, KeyClass: "ip"},
			{Name: "shadow_ip", Quota: 10, Window: time.Minute, Key: remoteAddrKey, KeyClass: "ip", Shadow: true},
		},
	})
	if err := m.WatchEngine("main", eng); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemoryStore("memory", store); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()

	// 2 budgets × 14 series, 5 store error kinds, 2 latency histograms,
	// breaker, entries, evictions.
	const wantSeries = 2*14 + 5 + 2 + 3
	_, before := scrape(t, srv.URL)
	if before != wantSeries {
		t.Fatalf("%d series before traffic, want %d", before, wantSeries)
	}

	l := eng.MustLayer(core.Use("per_ip", "shadow_ip"))
	var d core.Decision
	for i := range keys {
		r := core.Request{Method: "GET", Route: "/x", RemoteAddr: fmt.Sprintf("10.%d.%d.%d:443", i>>16, (i>>8)&255, i&255)}
		d.Reset()
		l.Decide(&r, &d)
		if !d.Allowed {
			t.Fatalf("key %d denied", i)
		}
	}

	got, after := scrape(t, srv.URL)
	if after != before {
		t.Fatalf("%d series after %d distinct keys, %d before", after, keys, before)
	}
	for k := range got {
		if strings.Contains(k, "10.") {
			t.Fatalf("a key became a label value: %s", k)
		}
	}
	for _, b := range []string{"per_ip", "shadow_ip"} {
		if v := got[series("quotagate_decisions_total", "budget", b, "outcome", "allowed")]; v != keys {
			t.Errorf("%s allowed = %v, want %d", b, v, keys)
		}
	}
	entries := got[series("quotagate_memory_store_entries", "store", "memory")]
	evictions := got[series("quotagate_memory_store_evictions_total", "store", "memory")]
	if entries > 4096 || entries != float64(store.Len()) {
		t.Errorf("memory store entries %v (Len %d), cap 4096", entries, store.Len())
	}
	// Nothing expires under the frozen clock: every insertion beyond the
	// cap evicted exactly one entry.
	if entries+evictions != 2*keys {
		t.Errorf("entries %v + evictions %v != %d insertions", entries, evictions, 2*keys)
	}
}

// TestBudgetLabelsCapped checks the defensive cap on distinct budget label
// values.
func TestBudgetLabelsCapped(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{MaxBudgets: 4})
	var budgets []core.Budget
	var names []string
	for i := range 10 {
		n := fmt.Sprintf("b%d", i)
		names = append(names, n)
		budgets = append(budgets, core.Budget{Name: n, Quota: 100, Window: time.Minute, Key: constKey})
	}
	eng := core.MustNew(core.Config{Store: newMemoryStore(t, c, 0, 0), Clock: c, Observer: m, Budgets: budgets})
	l := eng.MustLayer(core.Use(names...))
	for range 3 {
		var d core.Decision
		l.Decide(&core.Request{Method: "GET"}, &d)
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	got, n := scrape(t, srv.URL)
	labels := map[string]bool{}
	for k := range got {
		if i := strings.Index(k, `budget="`); i >= 0 {
			v := k[i+len(`budget="`):]
			labels[v[:strings.IndexByte(v, '"')]] = true
		}
	}
	if len(labels) != 5 || !labels[metrics.OtherBudget] {
		t.Fatalf("budget label values %v, want 4 budgets and %q", labels, metrics.OtherBudget)
	}
	if v := got[series("quotagate_decisions_total", "budget", metrics.OtherBudget, "outcome", "allowed")]; v != 6*3 {
		t.Errorf("%s allowed = %v, want 18 (6 budgets × 3 requests)", metrics.OtherBudget, v)
	}
	if want := 5*14 + 5 + 2; n != want {
		t.Errorf("%d series, want %d", n, want)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []metrics.Config{{MaxBudgets: -1}, {NearLimit: 2}} {
		if _, err := metrics.New(prometheus.NewRegistry(), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	reg := prometheus.NewRegistry()
	metrics.MustNew(reg, metrics.Config{})
	if _, err := metrics.New(reg, metrics.Config{}); err == nil {
		t.Error("registering twice with one registry succeeded")
	}
	// A namespace and constant labels apply to every series.
	reg = prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{Namespace: "edge", ConstLabels: prometheus.Labels{"service": "api"}, Budgets: []string{"a"}})
	m.ObserveError(core.KindStoreError, "", fmt.Errorf("boom"))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "edge_") {
			t.Errorf("family %s without the namespace", f.GetName())
		}
		for _, mt := range f.Metric {
			found := false
			for _, lp := range mt.Label {
				found = found || (lp.GetName() == "service" && lp.GetValue() == "api")
			}
			if !found {
				t.Errorf("a series of %s lacks service=api", f.GetName())
			}
		}
	}
	if err := m.WatchEngine("x", nil); err == nil {
		t.Error("nil engine accepted")
	}
	if err := m.WatchMemoryStore("x", nil); err == nil {
		t.Error("nil store accepted")
	}
}
