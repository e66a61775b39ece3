package otelmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/otelmetrics"
)

// TestWatchAdaptiveAsPrometheus checks that an adaptive limit's series are
// those core/metrics exports, with the same values.
func TestWatchAdaptiveAsPrometheus(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	o := otelmetrics.MustNew(mp, otelmetrics.Config{})
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	lim := adaptive.MustNew(adaptive.Config{Initial: 1, Min: 1, Max: 1, Samples: 1, SampleEvery: 1})
	if err := o.WatchAdaptive("api", lim); err != nil {
		t.Fatal(err)
	}
	if err := o.WatchAdaptive("api", lim); err == nil {
		t.Error("a name watched twice")
	}
	if err := o.WatchAdaptive("x", nil); err == nil {
		t.Error("a nil limiter watched")
	}
	if err := m.WatchAdaptive("api", lim); err != nil {
		t.Fatal(err)
	}
	r := &core.Request{}
	lim.Admit(r, nil)
	lim.Admit(r, nil) // shed
	lim.Release(true, 20*time.Millisecond, 200)
	lim.Admit(r, nil)

	g := &rig{reader: reader, prom: reg}
	got, prom := g.series(t), g.promSeries(t)
	for key, want := range map[string]float64{
		"quotagate_adaptive_limit{limiter=api}":                         1,
		"quotagate_adaptive_in_flight{limiter=api}":                     1,
		"quotagate_adaptive_shed_total{limiter=api,priority=critical}":  1,
		"quotagate_adaptive_shed_total{limiter=api,priority=sheddable}": 0,
		"quotagate_adaptive_signal{limiter=api}":                        1,
		"quotagate_adaptive_latency_seconds{kind=mean,limiter=api}":     0.02,
		"quotagate_adaptive_latency_seconds{kind=no_load,limiter=api}":  0.02,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("OTel %s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	n := 0
	for key, v := range got {
		if !strings.HasPrefix(key, "quotagate_adaptive_") {
			continue
		}
		n++
		if pv, ok := prom[key]; !ok || pv != v {
			t.Errorf("OTel %s = %v; core/metrics has %v (present %v)", key, v, pv, ok)
		}
	}
	if n != 8 {
		t.Errorf("%d adaptive series, want 8", n)
	}
}
