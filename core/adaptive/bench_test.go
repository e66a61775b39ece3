package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
)

// BenchmarkLimiter measures the controller alone: one Admit and one
// Release per request, updates included (every 50 samples).
func BenchmarkLimiter(b *testing.B) {
	prio := func(r *core.Request) adaptive.Priority {
		if r.Method == "GET" {
			return adaptive.Normal
		}
		return adaptive.Critical
	}
	for _, c := range []struct {
		name string
		cfg  adaptive.Config
	}{
		{"latency", adaptive.Config{Initial: 1000, Max: 1000}},
		{"priority", adaptive.Config{Initial: 1000, Max: 1000, Priority: prio}},
	} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			l := adaptive.MustNew(c.cfg)
			r := &core.Request{Method: "GET"}
			var s core.GuardState
			b.ReportAllocs()
			for b.Loop() {
				if ok, timed := l.Admit(r, &s); ok {
					var lat time.Duration
					if timed {
						lat = time.Millisecond
					}
					l.Release(true, lat, 0)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			l := adaptive.MustNew(c.cfg)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := &core.Request{Method: "GET"}
				var s core.GuardState
				for pb.Next() {
					if ok, timed := l.Admit(r, &s); ok {
						var lat time.Duration
						if timed {
							lat = time.Millisecond
						}
						l.Release(true, lat, 0)
					}
				}
			})
		})
	}
}

// BenchmarkLayer measures what a guard adds to a layer's decision: the
// same one-budget layer, with and without the adaptive limit, through
// Decide and Done as an adapter's sequence runs them.
func BenchmarkLayer(b *testing.B) {
	for _, c := range []struct {
		name  string
		every int // 0: no guard
	}{{"unguarded", 0}, {"guarded", 4}, {"guarded-untimed", 1 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			opts := []core.LayerOption{core.Use("b")}
			if c.every > 0 {
				opts = append(opts, core.GuardBy(adaptive.MustNew(adaptive.Config{Initial: 1000, Max: 1000, SampleEvery: c.every})))
			}
			l := engine(b).MustLayer(opts...)
			r := &core.Request{Method: "GET", Path: "/"}
			var d core.Decision
			b.ReportAllocs()
			for b.Loop() {
				d.Reset()
				l.Decide(r, &d)
				d.Done(context.Background(), 200)
			}
		})
	}
}

// nopExchange is a router response that discards everything.
type nopExchange struct{ buf [256]byte }

func (x *nopExchange) FieldBuffer() []byte                    { return x.buf[:0] }
func (x *nopExchange) SetHeader(string, string)               {}
func (x *nopExchange) DelHeader(string)                       {}
func (x *nopExchange) Deny(*core.Decision, core.Denial) error { return nil }
func (x *nopExchange) Next(bool) (int, error)                 { return 200, nil }

// BenchmarkServe measures what a guard adds to the request sequence every
// router adapter runs (core.Layer.Serve), header fields included: the
// same one-budget layer with and without the adaptive limit.
func BenchmarkServe(b *testing.B) {
	for _, guarded := range []bool{false, true} {
		name := "unguarded"
		if guarded {
			name = "guarded"
		}
		b.Run(name, func(b *testing.B) {
			opts := []core.LayerOption{core.Use("b")}
			if guarded {
				opts = append(opts, core.GuardBy(adaptive.MustNew(adaptive.Config{Initial: 1000, Max: 1000})))
			}
			l := engine(b).MustLayer(opts...)
			var st core.RequestState
			var x nopExchange
			b.ReportAllocs()
			for b.Loop() {
				st.Reset()
				st.Request.Method, st.Request.Path = "GET", "/"
				if err := l.Serve(&st, &x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
