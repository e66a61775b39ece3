package otelmetrics_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/otelmetrics"
)

// BenchmarkObserveAllowed is the observer's cost per allowed layer
// decision, recording into the OTel SDK.
func BenchmarkObserveAllowed(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	o := otelmetrics.MustNew(mp, otelmetrics.Config{})
	d := &core.Decision{Allowed: true, Results: []core.Result{{Item: core.Item{Budget: "b", Limit: core.Limit{Quota: 10}}, Outcome: core.Outcome{Allowed: true, Remaining: 5}}}}
	r := &core.Request{Context: context.Background()}
	b.ReportAllocs()
	for b.Loop() {
		o.ObserveDecision(r, d, d.Results, time.Microsecond)
	}
}
