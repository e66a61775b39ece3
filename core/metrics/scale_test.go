package metrics_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/scale"
)

func TestWatchScale(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	load := 3.0
	c := scale.MustNew(scale.Config{Signal: func() float64 { return load }, Target: 1, Step: 0.25, Interval: time.Millisecond})
	if err := m.WatchScale("api", c); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchScale("api", c); err == nil {
		t.Error("a name watched twice")
	}
	if err := m.WatchScale("x", nil); err == nil {
		t.Error("a nil controller watched")
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()

	got, _ := scrape(t, srv.URL)
	for k, want := range map[string]float64{
		series("quotagate_budget_scale", "budget", "api"):               1,
		series("quotagate_budget_scale_signal", "budget", "api"):        0,
		series("quotagate_budget_scale_changes_total", "budget", "api"): 0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("before an update: %s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	// Three times the target: the next update takes a step of 0.25.
	time.Sleep(2 * time.Millisecond)
	if f := c.Scale(); f != 0.75 {
		t.Fatalf("scale %v after an update at three times the target, want 0.75", f)
	}
	got, _ = scrape(t, srv.URL)
	for k, want := range map[string]float64{
		series("quotagate_budget_scale", "budget", "api"):               0.75,
		series("quotagate_budget_scale_signal", "budget", "api"):        3,
		series("quotagate_budget_scale_changes_total", "budget", "api"): 1,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("after an update: %s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}
