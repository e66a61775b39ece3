package ginmw_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/nethttp"
)

// TestStackAcrossRequestReplacement: a middleware between two layers that
// replaces the request (c.Request = r.WithContext(...), as authentication
// middleware does) leaves the layers one decision: the inner layer's
// denial refunds the outer layer's charge, and the response carries both
// budgets' fields.
func TestStackAcrossRequestReplacement(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: constKey},
		{Name: "inner", Algorithm: core.TokenBucket, Quota: 1, Window: time.Minute, Key: constKey},
	}})
	r := gin.New()
	g := r.Group("/", ginmw.MustMiddleware(eng, core.Use("outer")), func(c *gin.Context) {
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), ctxKey{}, "user"))
		c.Next()
	})
	g.GET("/both", ginmw.MustMiddleware(eng, core.Use("inner")), func(c *gin.Context) { c.Status(http.StatusOK) })
	g.GET("/outer", func(c *gin.Context) { c.Status(http.StatusOK) })

	if w := serveOnce(r, http.MethodGet, "/both"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	w := serveOnce(r, http.MethodGet, "/both")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429 from the inner layer", w.Code)
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `"outer"`) || !strings.Contains(p, `"inner"`) {
		t.Errorf("denial's RateLimit-Policy %q, want both budgets", p)
	}
	w = serveOnce(r, http.MethodGet, "/outer")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"outer";r=3;`) {
		t.Errorf("outer after the denial: RateLimit %q, want r=3 (the denied request refunded)", got)
	}
}

// TestStackBehindNetHTTPLayer: a Gin engine served behind a net/http layer
// (nethttp.Middleware around the engine, one budget in each) makes one
// decision of the two layers, and the Gin layer's key function reads the
// Gin context although the net/http layer made the request's state.
func TestStackBehindNetHTTPLayer(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	user := ginmw.Key(func(c *gin.Context) (string, error) { return c.GetString("user"), nil })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: constKey},
		{Name: "inner", Algorithm: core.TokenBucket, Quota: 1, Window: time.Minute, Key: user},
	}})
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", c.Query("user")) })
	r.GET("/both", ginmw.MustMiddleware(eng, core.Use("inner")), func(c *gin.Context) { c.Status(http.StatusOK) })
	h := nethttp.MustMiddleware(eng, core.Use("outer"))(r)

	if w := serveOnce(h, http.MethodGet, "/both?user=ann"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	w := serveOnce(h, http.MethodGet, "/both?user=ann")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request of ann: %d, want 429 from the inner layer", w.Code)
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `"outer"`) || !strings.Contains(p, `"inner"`) {
		t.Errorf("denial's RateLimit-Policy %q, want both budgets", p)
	}
	w = serveOnce(h, http.MethodGet, "/both?user=bob")
	if w.Code != http.StatusOK {
		t.Fatalf("first request of bob: %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"outer";r=3;`) {
		t.Errorf("bob's RateLimit %q, want outer r=3 (ann's denied request refunded)", got)
	}
}
