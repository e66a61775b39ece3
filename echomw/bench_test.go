package echomw_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/internal/benchengine"
)

func noop(echo.Context) error { return nil }

// benchPeer is another limiter measured next to quotagate (see
// peer_bench_test.go).
type benchPeer struct {
	name string
	mw   func(b *testing.B) echo.MiddlewareFunc
}

var peers []benchPeer

// BenchmarkMiddleware measures an Echo no-op route (GET /) with and without
// quotagate, serially, in process: (*echo.Echo).ServeHTTP with one reused
// httptest.ResponseRecorder whose header map is cleared per request. Built
// with -tags peerbench it also measures Echo's own RateLimiter.
func BenchmarkMiddleware(b *testing.B) {
	run := func(b *testing.B, e *echo.Echo, wantHeader string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "203.0.113.9:41000"
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			clear(w.HeaderMap)
			w.Body.Reset()
			e.ServeHTTP(w, req)
		}
		if w.Code != http.StatusOK || (wantHeader != "" && w.Header().Get(wantHeader) == "") {
			b.Fatalf("last response: %d %v", w.Code, w.Header())
		}
	}
	b.Run("bare", func(b *testing.B) {
		e := echo.New()
		e.GET("/", noop)
		run(b, e, "")
	})
	for _, s := range []struct {
		name   string
		style  core.HeaderStyle
		header string
	}{{"ietf", core.HeadersIETF, "RateLimit"}, {"x", core.HeadersX, "X-RateLimit-Limit"}, {"none", core.HeadersNone, ""}} {
		b.Run("quotagate/headers="+s.name, func(b *testing.B) {
			e := echo.New()
			e.Use(echomw.MustMiddleware(benchengine.HotEngine(b, s.style), core.Use("per_ip")))
			e.GET("/", noop)
			run(b, e, s.header)
		})
	}
	// A request the layer's Skipper passes through: the cost of a health
	// check behind the limit.
	b.Run("quotagate/skipped", func(b *testing.B) {
		e := echo.New()
		e.Use(echomw.MustMiddleware(benchengine.HotEngine(b, core.HeadersIETF), core.Use("per_ip"),
			echomw.Skipper(func(echo.Context) bool { return true })))
		e.GET("/", noop)
		run(b, e, "")
	})
	b.Run("quotagate/stacked", func(b *testing.B) {
		eng := benchengine.HotEngine(b, core.HeadersIETF)
		e := echo.New()
		g := e.Group("", echomw.MustMiddleware(eng, core.Use("per_ip")))
		g.GET("/", noop, echomw.MustMiddleware(eng, core.Use("writes")))
		run(b, e, "RateLimit")
	})
	// The floor under every adapter: a plain Echo middleware that asks
	// the layer for a decision (Layer.Decide, pooled request view and
	// decision) and nothing else: no state shared with other layers, no
	// header fields, no CountWhen. What quotagate/headers=none costs above
	// it is the request sequence of core.Layer.Serve and the state that
	// stacked layers share.
	b.Run("floor/decide-only", func(b *testing.B) {
		l := benchengine.HotEngine(b, core.HeadersNone).MustLayer(core.Use("per_ip"))
		type view struct {
			r core.Request
			d core.Decision
		}
		views := sync.Pool{New: func() any { return new(view) }}
		e := echo.New()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				r, v := c.Request(), views.Get().(*view)
				defer views.Put(v)
				v.d.Reset()
				v.r = core.Request{Method: r.Method, Path: r.URL.Path, RemoteAddr: r.RemoteAddr, Header: r.Header, Context: r.Context()}
				l.Decide(&v.r, &v.d)
				if !v.d.Allowed {
					return c.NoContent(http.StatusTooManyRequests)
				}
				return next(c)
			}
		})
		e.GET("/", noop)
		run(b, e, "")
	})
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			e := echo.New()
			e.Use(p.mw(b))
			e.GET("/", noop)
			run(b, e, "")
		})
	}
}
