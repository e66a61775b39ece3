package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/benchengine"
	"github.com/quotagate/quotagate/nethttp"
)

// nopWriter is a ResponseWriter that discards everything and reuses one
// header map, so the benchmark measures the middleware, not the recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

func benchHandler(b *testing.B, style core.HeaderStyle) http.Handler {
	return nethttp.MustMiddleware(benchengine.HotEngine(b, style), core.Use("per_ip"))(http.HandlerFunc(noop))
}

func noop(http.ResponseWriter, *http.Request) {}

func BenchmarkMiddleware(b *testing.B) {
	run := func(b *testing.B, h http.Handler) {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = "203.0.113.9:41000"
		w := &nopWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, http.HandlerFunc(noop)) })
	b.Run("headers=ietf", func(b *testing.B) { run(b, benchHandler(b, core.HeadersIETF)) })
	b.Run("headers=x", func(b *testing.B) { run(b, benchHandler(b, core.HeadersX)) })
	b.Run("headers=none", func(b *testing.B) { run(b, benchHandler(b, core.HeadersNone)) })
	// A layer that wraps a ServeMux asks it for the route first: the
	// request is routed twice (here "GET /hello", a route without
	// wildcards).
	b.Run("wraps-mux", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /hello", noop)
		run(b, nethttp.MustMiddleware(benchengine.HotEngine(b, core.HeadersIETF), core.Use("per_ip"))(mux))
	})
	// A request the layer's Skip predicate passes through: the cost of a
	// health check behind the limit.
	b.Run("skipped", func(b *testing.B) {
		run(b, nethttp.MustMiddleware(benchengine.HotEngine(b, core.HeadersIETF), core.Use("per_ip"),
			nethttp.Skip(func(*http.Request) bool { return true }))(http.HandlerFunc(noop)))
	})
	// The floor under the adapter (benchengine.Floor): a middleware that
	// asks a layer for a decision and nothing else; with decide-copy it
	// also hands on a copy of the request whose context carries a value,
	// which is how stacked layers and DecisionFrom find one request's
	// state.
	for _, carry := range []bool{false, true} {
		b.Run(benchengine.FloorName(carry), func(b *testing.B) {
			f := benchengine.NewFloor(b)
			run(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if carry {
					r = benchengine.Carry(r)
				}
				if !f.AllowHTTP(r) {
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				floorNext.ServeHTTP(w, r)
			}))
		})
	}
	b.Run("parallel/bare", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			h := http.HandlerFunc(noop)
			req := httptest.NewRequest("GET", "/hello", nil)
			w := &nopWriter{h: http.Header{}}
			for pb.Next() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	})
	b.Run("parallel/headers=ietf", func(b *testing.B) {
		h := benchHandler(b, core.HeadersIETF)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest("GET", "/hello", nil)
			req.RemoteAddr = "203.0.113.9:41000"
			w := &nopWriter{h: http.Header{}}
			for pb.Next() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	})
}

// floorNext is the next handler, behind an interface as a middleware sees
// it, so the compiler cannot prove the request copy stays on the stack.
var floorNext http.Handler = http.HandlerFunc(noop)

// BenchmarkConcurrency measures a concurrency budget through the
// middleware on a request whose context can be cancelled, as a server's
// is: the slot is taken and given back per request.
func BenchmarkConcurrency(b *testing.B) {
	store := memstore.MustNew(memstore.Config{})
	b.Cleanup(func() { _ = store.Close() })
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{
		Name: "inflight", Algorithm: core.Concurrency, Quota: core.MaxConcurrencyQuota,
		Window: time.Minute, Key: func(*core.Request) (string, error) { return "all", nil },
	}}})
	h := nethttp.MustMiddleware(eng, core.Use("inflight"))(http.HandlerFunc(noop))
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	req := httptest.NewRequest("GET", "/hello", nil).WithContext(ctx)
	w := &nopWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}
