package ginmw_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/internal/benchengine"
)

func noop(*gin.Context) {}

// BenchmarkMiddleware measures a Gin no-op route (GET /) with and without
// quotagate, serially, in process: (*gin.Engine).ServeHTTP with one reused
// httptest.ResponseRecorder whose header map is cleared per request.
func BenchmarkMiddleware(b *testing.B) {
	run := func(b *testing.B, r *gin.Engine, wantHeader string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "203.0.113.9:41000"
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			clear(w.HeaderMap)
			w.Body.Reset()
			r.ServeHTTP(w, req)
		}
		if w.Code != http.StatusOK || (wantHeader != "" && w.Header().Get(wantHeader) == "") {
			b.Fatalf("last response: %d %v", w.Code, w.Header())
		}
	}
	gin.SetMode(gin.ReleaseMode)
	b.Run("bare", func(b *testing.B) {
		r := gin.New()
		r.GET("/", noop)
		run(b, r, "")
	})
	for _, s := range []struct {
		name   string
		style  core.HeaderStyle
		header string
	}{{"ietf", core.HeadersIETF, "RateLimit"}, {"x", core.HeadersX, "X-RateLimit-Limit"}, {"none", core.HeadersNone, ""}} {
		b.Run("quotagate/headers="+s.name, func(b *testing.B) {
			r := gin.New()
			r.Use(ginmw.MustMiddleware(benchengine.HotEngine(b, s.style), core.Use("per_ip")))
			r.GET("/", noop)
			run(b, r, s.header)
		})
	}
	// A request the layer's Skip predicate passes through: the cost of a
	// health check behind the limit.
	b.Run("quotagate/skipped", func(b *testing.B) {
		r := gin.New()
		r.Use(ginmw.MustMiddleware(benchengine.HotEngine(b, core.HeadersIETF), core.Use("per_ip"),
			ginmw.Skip(func(*gin.Context) bool { return true })))
		r.GET("/", noop)
		run(b, r, "")
	})
	b.Run("quotagate/stacked", func(b *testing.B) {
		eng := benchengine.HotEngine(b, core.HeadersIETF)
		r := gin.New()
		g := r.Group("/", ginmw.MustMiddleware(eng, core.Use("per_ip")))
		g.GET("/", ginmw.MustMiddleware(eng, core.Use("writes")), noop)
		run(b, r, "RateLimit")
	})
	// The floor under the adapter (benchengine.Floor): a plain Gin
	// middleware that asks a layer for a decision and nothing else; with
	// decide-copy it also hands on a copy of the request whose context
	// carries a value (c.Request), which is how stacked layers find one
	// request's state.
	for _, carry := range []bool{false, true} {
		b.Run(benchengine.FloorName(carry), func(b *testing.B) {
			f := benchengine.NewFloor(b)
			r := gin.New()
			r.Use(func(c *gin.Context) {
				if carry {
					c.Request = benchengine.Carry(c.Request)
				}
				if !f.AllowHTTP(c.Request) {
					c.AbortWithStatus(http.StatusTooManyRequests)
					return
				}
				c.Next()
			})
			r.GET("/", noop)
			run(b, r, "")
		})
	}
}
