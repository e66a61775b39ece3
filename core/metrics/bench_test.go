package metrics_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
)

// decided returns real decisions of a two-budget layer (one budget a shadow
// budget): an allowed one near its limit, and a denied one.
func decided(tb testing.TB) (allowed, denied *core.Decision) {
	c := newClock()
	eng := core.MustNew(core.Config{
		Store: newMemoryStore(tb, c, 0, 0), Clock: c,
		Budgets: []core.Budget{
			{Name: "tenant", Quota: 5, Window: time.Minute, Key: constKey, KeyClass: "tenant"},
			{Name: "global", Quota: 2, Window: time.Minute, Key: constKey, KeyClass: "global", Shadow: true},
		},
	})
	l := eng.MustLayer(core.Use("tenant", "global"))
	var last core.Decision
	for range 5 {
		last.Reset()
		l.Decide(&core.Request{Method: "GET"}, &last)
	}
	var den core.Decision
	l.Decide(&core.Request{Method: "GET"}, &den)
	if !last.Allowed || den.Allowed {
		tb.Fatalf("setup: allowed %v, denied %v", last.Allowed, !den.Allowed)
	}
	return &last, &den
}

func newObservers(tb testing.TB) (*metrics.Metrics, *observe.Logger) {
	m := metrics.MustNew(prometheus.NewRegistry(), metrics.Config{})
	lg := observe.MustLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})), observe.LoggerConfig{})
	return m, lg
}

// TestObserveDecisionDoesNotAllocate pins the allocation contract: the
// metrics observer, and the logger when it has nothing to write, cost no
// allocation per decision.
func TestObserveDecisionDoesNotAllocate(t *testing.T) {
	allowed, denied := decided(t)
	m, lg := newObservers(t)
	r := &core.Request{Method: "GET", Route: "/x"}
	both := observe.Multi(m, lg)
	for name, obs := range map[string]core.Observer{"metrics": m, "logger": lg, "multi": both} {
		for dname, d := range map[string]*core.Decision{"allowed": allowed, "denied": denied} {
			if obs == core.Observer(lg) && dname == "denied" {
				continue // the logger writes denials (disabled here, but it checks)
			}
			obs.ObserveDecision(r, d, d.Results, time.Microsecond) // create series
			if n := testing.AllocsPerRun(1000, func() { obs.ObserveDecision(r, d, d.Results, time.Microsecond) }); n != 0 {
				t.Errorf("%s, %s decision: %v allocations per decision", name, dname, n)
			}
		}
	}
}

func BenchmarkObserveDecision(b *testing.B) {
	allowed, _ := decided(b)
	m, lg := newObservers(b)
	r := &core.Request{Method: "GET", Route: "/x"}
	for _, bc := range []struct {
		name string
		obs  core.Observer
	}{{"metrics", m}, {"logger", lg}, {"metrics+logger", observe.Multi(m, lg)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.obs.ObserveDecision(r, allowed, allowed.Results, time.Microsecond)
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bc.obs.ObserveDecision(r, allowed, allowed.Results, time.Microsecond)
				}
			})
		})
	}
}

// BenchmarkDecide measures a whole decision on the memory store with and
// without observers, to put the observer's cost in context.
func BenchmarkDecide(b *testing.B) {
	m, lg := newObservers(b)
	for _, bc := range []struct {
		name string
		obs  core.Observer
	}{{"no-observer", nil}, {"metrics", m}, {"metrics+logger", observe.Multi(m, lg)}} {
		b.Run(bc.name, func(b *testing.B) {
			eng := core.MustNew(core.Config{
				Store: newMemoryStore(b, core.NewSystemClock(), 0, 0), Observer: bc.obs,
				Budgets: []core.Budget{
					{Name: "tenant", Quota: 1 << 40, Window: time.Hour, Key: constKey},
				},
			})
			l := eng.MustLayer(core.Use("tenant"))
			r := &core.Request{Method: "GET"}
			var d core.Decision
			b.ReportAllocs()
			for b.Loop() {
				d.Reset()
				l.Decide(r, &d)
			}
			if !d.Allowed {
				b.Fatal("denied")
			}
		})
	}
}
