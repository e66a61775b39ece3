package inspect_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/inspect"
)

// BenchmarkRecentAllowed is what the Recent observer adds to an allowed
// request (per layer): looking its route up for the layer's budget.
func BenchmarkRecentAllowed(b *testing.B) {
	recent := inspect.NewRecent(0)
	d := &core.Decision{Allowed: true, Results: []core.Result{{Item: core.Item{Budget: "b", Key: "k"}, Outcome: core.Outcome{Allowed: true}}}}
	r := &core.Request{Method: "GET", Path: "/x", Route: "/x"}
	b.ReportAllocs()
	for b.Loop() {
		recent.ObserveDecision(r, d, d.Results, time.Microsecond)
	}
}

// BenchmarkRecentDenied is the cost of recording a denial.
func BenchmarkRecentDenied(b *testing.B) {
	recent := inspect.NewRecent(0)
	d := &core.Decision{Reason: core.ReasonRateLimited, DeniedBy: "b", RetryAfter: time.Second,
		Results: []core.Result{{Item: core.Item{Budget: "b", Key: "203.0.113.7"}}}}
	r := &core.Request{Method: "GET", Path: "/x", Route: "/x"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			recent.ObserveDecision(r, d, d.Results, time.Microsecond)
		}
	})
}
