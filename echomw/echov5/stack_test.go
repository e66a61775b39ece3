package echov5_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw/echov5"
)

type userKey struct{}

// TestStackAcrossRequestReplacement: a middleware between two layers that
// replaces the request
// (c.SetRequest(r.WithContext(...))) leaves the layers one decision: the
// inner layer's denial refunds the outer layer's charge, the response
// carries both budgets' fields, and the handler reads the decision.
func TestStackAcrossRequestReplacement(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: constKey},
		{Name: "inner", Algorithm: core.TokenBucket, Quota: 1, Window: time.Minute, Key: constKey},
	}})
	e := echo.New()
	g := e.Group("", echov5.MustMiddleware(eng, core.Use("outer")), func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), userKey{}, "user")))
			return next(c)
		}
	})
	results := 0
	g.GET("/both", func(c *echo.Context) error {
		if d := echov5.DecisionFrom(c); d != nil {
			results = len(d.Results)
		}
		return c.NoContent(http.StatusOK)
	}, echov5.MustMiddleware(eng, core.Use("inner")))
	g.GET("/outer", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })

	if w := serveOnce(e, http.MethodGet, "/both"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	if results != 2 {
		t.Errorf("the handler's decision has %d results, want 2 (outer and inner)", results)
	}
	w := serveOnce(e, http.MethodGet, "/both")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429 from the inner layer", w.Code)
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `"outer"`) || !strings.Contains(p, `"inner"`) {
		t.Errorf("denial's RateLimit-Policy %q, want both budgets", p)
	}
	w = serveOnce(e, http.MethodGet, "/outer")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"outer";r=3;`) {
		t.Errorf("outer after the denial: RateLimit %q, want r=3 (the denied request refunded)", got)
	}
}
