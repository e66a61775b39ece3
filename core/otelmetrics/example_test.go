package otelmetrics_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/otelmetrics"
)

// Record an engine's decisions through an OpenTelemetry meter provider
// (here the SDK with an in-memory reader; in a service, the provider its
// exporter is set up with, or otel.GetMeterProvider()).
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs := otelmetrics.MustNew(mp, otelmetrics.Config{})

	eng := core.MustNew(core.Config{
		Store:    memstore.MustNew(memstore.Config{}),
		Observer: obs, // or observe.Multi(obs, logs, ...)
		Budgets: []core.Budget{{Name: "per_ip", Quota: 2, Window: time.Minute,
			Key: func(r *core.Request) (string, error) { return r.RemoteAddr, nil }}},
	})
	layer := eng.MustLayer(core.Use("per_ip"))
	for range 3 {
		var d core.Decision
		layer.Decide(&core.Request{Method: "GET", RemoteAddr: "192.0.2.1"}, &d)
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "quotagate_decisions_total" {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := p.Attributes.Value("outcome")
			fmt.Println(outcome.AsString(), p.Value)
		}
	}
	// Unordered output:
	// allowed 2
	// denied 1
}
