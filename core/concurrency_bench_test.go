package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// BenchmarkConcurrency compares a concurrency budget's decision and
// release with a window budget's decision plus one store refund (what a
// release is), on one hot key through a Layer, as BenchmarkDecide does.
func BenchmarkConcurrency(b *testing.B) {
	ctx := context.Background()
	window := core.Budget{Name: "b", Quota: 1e12, Window: time.Hour, Key: remoteAddrKey}
	conc := core.Budget{Name: "b", Algorithm: core.Concurrency, Quota: core.MaxConcurrencyQuota, Window: time.Minute, Key: remoteAddrKey}
	b.Run("window-decide", func(b *testing.B) {
		e, _ := newEngine(b, core.NewSystemClock(), window)
		l := e.MustLayer(core.Use("b"))
		r := request("GET", "203.0.113.9")
		var d core.Decision
		b.ReportAllocs()
		for b.Loop() {
			d.Reset()
			l.Decide(r, &d)
		}
	})
	b.Run("window-decide+refund", func(b *testing.B) {
		e, s := newEngine(b, core.NewSystemClock(), window)
		l := e.MustLayer(core.Use("b"))
		r := request("GET", "203.0.113.9")
		var d core.Decision
		items, outs := make([]core.Item, 1), make([]core.Outcome, 1)
		b.ReportAllocs()
		for b.Loop() {
			d.Reset()
			l.Decide(r, &d)
			items[0], outs[0] = d.Results[0].Item, d.Results[0].Outcome
			_ = s.Refund(ctx, items, outs)
		}
	})
	b.Run("concurrency-decide+release", func(b *testing.B) {
		e, _ := newEngine(b, core.NewSystemClock(), conc)
		l := e.MustLayer(core.Use("b"))
		r := request("GET", "203.0.113.9")
		var d core.Decision
		b.ReportAllocs()
		for b.Loop() {
			d.Reset()
			l.Decide(r, &d)
			d.Release(ctx)
		}
		if !d.Allowed {
			b.Fatal("denied")
		}
	})
	b.Run("concurrency-decide+release-parallel", func(b *testing.B) {
		e, _ := newEngine(b, core.NewSystemClock(), conc)
		l := e.MustLayer(core.Use("b"))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := request("GET", "203.0.113.9")
			var d core.Decision
			for pb.Next() {
				d.Reset()
				l.Decide(r, &d)
				d.Release(ctx)
			}
		})
	})
	b.Run("window-decide+refund-parallel", func(b *testing.B) {
		e, s := newEngine(b, core.NewSystemClock(), window)
		l := e.MustLayer(core.Use("b"))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := request("GET", "203.0.113.9")
			var d core.Decision
			items, outs := make([]core.Item, 1), make([]core.Outcome, 1)
			for pb.Next() {
				d.Reset()
				l.Decide(r, &d)
				items[0], outs[0] = d.Results[0].Item, d.Results[0].Outcome
				_ = s.Refund(ctx, items, outs)
			}
		})
	})
}
