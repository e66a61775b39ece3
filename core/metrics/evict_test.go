package metrics_test

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
)

// Given to a memory store as its observer, Metrics counts evictions per
// budget: the flooded budget's series equals the store's count, and a
// budget that lost nothing gets no series.
func TestEvictionsPerBudget(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	obs := observe.Multi(m)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 16, Shards: 1, SweepInterval: -1, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: s, Clock: c, Observer: obs, Budgets: []core.Budget{
		{Name: "tenant", Quota: 3, Window: time.Minute, Key: constKey, KeyClass: "tenant"},
		{Name: "public", Quota: 100, Window: time.Hour, Key: remoteAddrKey, KeyClass: "ip"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var d core.Decision
	eng.MustLayer(core.Use("tenant")).Decide(&core.Request{Method: "GET", RemoteAddr: "192.0.2.1:1"}, &d)
	public := eng.MustLayer(core.Use("public"))
	for i := range 100 {
		d.Reset()
		public.Decide(&core.Request{Method: "GET", RemoteAddr: "198.51.100." + strconv.Itoa(i) + ":1"}, &d)
		if !d.Allowed {
			t.Fatalf("flood request %d denied", i)
		}
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	got, _ := scrape(t, srv.URL)
	want := float64(s.BudgetEvictions("public"))
	if want != 100+1-16 {
		t.Fatalf("store counted %v evictions in public", want)
	}
	if v, ok := got[series("quotagate_memory_evictions_total", "budget", "public")]; !ok || v != want {
		t.Fatalf("memory_evictions_total{budget=public} = %v (present %v), store counted %v", v, ok, want)
	}
	if v, ok := got[series("quotagate_memory_evictions_total", "budget", "tenant")]; ok {
		t.Fatalf("memory_evictions_total{budget=tenant} = %v: tenant lost nothing", v)
	}
}
