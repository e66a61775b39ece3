package otelmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/otelmetrics"
	"github.com/quotagate/quotagate/core/scale"
)

// TestWatchScaleAsPrometheus checks that a scale's series are those
// core/metrics exports, with the same values.
func TestWatchScaleAsPrometheus(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	o := otelmetrics.MustNew(mp, otelmetrics.Config{})
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	c := scale.MustNew(scale.Config{Signal: func() float64 { return 3 }, Target: 1, Step: 0.25, Interval: time.Millisecond})
	if err := o.WatchScale("api", c); err != nil {
		t.Fatal(err)
	}
	if err := o.WatchScale("api", c); err == nil {
		t.Error("a name watched twice")
	}
	if err := o.WatchScale("x", nil); err == nil {
		t.Error("a nil controller watched")
	}
	if err := m.WatchScale("api", c); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if f := c.Scale(); f != 0.75 {
		t.Fatalf("scale %v after an update at three times the target, want 0.75", f)
	}

	g := &rig{reader: reader, prom: reg}
	got, prom := g.series(t), g.promSeries(t)
	for key, want := range map[string]float64{
		"quotagate_budget_scale{budget=api}":               0.75,
		"quotagate_budget_scale_signal{budget=api}":        3,
		"quotagate_budget_scale_changes_total{budget=api}": 1,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("OTel %s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	n := 0
	for key, v := range got {
		if !strings.HasPrefix(key, "quotagate_budget_scale") {
			continue
		}
		n++
		if pv, ok := prom[key]; !ok || pv != v {
			t.Errorf("OTel %s = %v; core/metrics has %v (present %v)", key, v, pv, ok)
		}
	}
	if n != 3 {
		t.Errorf("%d scale series, want 3", n)
	}
}
