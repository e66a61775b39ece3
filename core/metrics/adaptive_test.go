package metrics_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/metrics"
)

func TestWatchAdaptive(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	lim := adaptive.MustNew(adaptive.Config{Initial: 2, Min: 2, Max: 2, Samples: 1, SampleEvery: 1,
		Priority: func(r *core.Request) adaptive.Priority {
			if r.Method == "GET" {
				return adaptive.Sheddable
			}
			return adaptive.Critical
		}})
	if err := m.WatchAdaptive("api", lim); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchAdaptive("api", lim); err == nil {
		t.Error("a name watched twice")
	}
	if err := m.WatchAdaptive("x", nil); err == nil {
		t.Error("a nil limiter watched")
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()

	// One critical request in flight, one sheddable shed (its share of 2
	// is 1), one critical request served in 30ms.
	if ok, _ := lim.Admit(&core.Request{Method: "POST"}, nil); !ok {
		t.Fatal("not admitted")
	}
	if ok, _ := lim.Admit(&core.Request{Method: "GET"}, nil); ok {
		t.Fatal("sheddable admitted beyond its share")
	}
	if ok, _ := lim.Admit(&core.Request{Method: "POST"}, nil); !ok {
		t.Fatal("not admitted")
	}
	lim.Release(true, 30*time.Millisecond, 200)

	got, _ := scrape(t, srv.URL)
	for k, want := range map[string]float64{
		series("quotagate_adaptive_limit", "limiter", "api"):                               2,
		series("quotagate_adaptive_in_flight", "limiter", "api"):                           1,
		series("quotagate_adaptive_shed_total", "limiter", "api", "priority", "sheddable"): 1,
		series("quotagate_adaptive_shed_total", "limiter", "api", "priority", "critical"):  0,
		series("quotagate_adaptive_signal", "limiter", "api"):                              1,
		series("quotagate_adaptive_latency_seconds", "kind", "mean", "limiter", "api"):     0.03,
		series("quotagate_adaptive_latency_seconds", "kind", "no_load", "limiter", "api"):  0.03,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}
