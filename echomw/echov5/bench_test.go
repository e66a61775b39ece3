package echov5_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/internal/benchengine"
)

func noop(*echo.Context) error { return nil }

// benchPeer is another limiter measured next to quotagate (see
// peer_bench_test.go).
type benchPeer struct {
	name   string
	header string // a header field the peer writes on every response
	mw     func(b *testing.B) echo.MiddlewareFunc
}

var peers []benchPeer

// BenchmarkMiddleware measures an Echo v5 no-op route (GET /) with and
// without quotagate, serially, in process: (*echo.Echo).ServeHTTP with one
// reused httptest.ResponseRecorder whose header map is cleared per request.
// It also measures a request the layer's Skipper skips, and Echo v5's own
// RateLimiter.
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
			e.Use(echov5.MustMiddleware(benchengine.HotEngine(b, s.style), core.Use("per_ip")))
			e.GET("/", noop)
			run(b, e, s.header)
		})
	}
	b.Run("quotagate/stacked", func(b *testing.B) {
		eng := benchengine.HotEngine(b, core.HeadersIETF)
		e := echo.New()
		g := e.Group("", echov5.MustMiddleware(eng, core.Use("per_ip")))
		g.GET("/", noop, echov5.MustMiddleware(eng, core.Use("writes")))
		run(b, e, "RateLimit")
	})
	b.Run("quotagate/skipped", func(b *testing.B) {
		e := echo.New()
		e.Use(echov5.MustMiddleware(benchengine.HotEngine(b, core.HeadersIETF), core.Use("per_ip"),
			echov5.Skipper(func(*echo.Context) bool { return true })))
		e.GET("/", noop)
		run(b, e, "")
	})
	// The floor under the adapter (benchengine.Floor): a plain Echo
	// middleware that asks a layer for a decision and nothing else; with
	// decide-copy it also hands on a copy of the request whose context
	// carries a value (c.SetRequest), which is how stacked layers find one
	// request's state.
	for _, carry := range []bool{false, true} {
		b.Run(benchengine.FloorName(carry), func(b *testing.B) {
			f := benchengine.NewFloor(b)
			e := echo.New()
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c *echo.Context) error {
					r := c.Request()
					if carry {
						r = benchengine.Carry(r)
						c.SetRequest(r)
					}
					if !f.AllowHTTP(r) {
						return c.NoContent(http.StatusTooManyRequests)
					}
					return next(c)
				}
			})
			e.GET("/", noop)
			run(b, e, "")
		})
	}
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			e := echo.New()
			e.Use(p.mw(b))
			e.GET("/", noop)
			run(b, e, p.header)
		})
	}
}
