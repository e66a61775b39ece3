package echomw_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/nethttp"
)

// customContext is the custom context of Echo's guide: a middleware wraps
// the echo.Context, and handlers assert their own type.
type customContext struct{ echo.Context }

type userKey struct{}

// TestStackAcrossRequestReplacement: a middleware between two layers that
// wraps the context in a custom one and replaces the request
// (c.SetRequest(r.WithContext(...))) leaves the layers one decision: the
// inner layer's denial refunds the outer layer's charge, the response
// carries both budgets' fields, and the handler gets its own context type
// and reads the decision from it.
func TestStackAcrossRequestReplacement(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: constKey},
		{Name: "inner", Algorithm: core.TokenBucket, Quota: 1, Window: time.Minute, Key: constKey},
	}})
	e := echo.New()
	g := e.Group("", echomw.MustMiddleware(eng, core.Use("outer")), func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), userKey{}, "user")))
			return next(&customContext{c})
		}
	})
	results := 0
	g.GET("/both", func(c echo.Context) error {
		cc, ok := c.(*customContext)
		if !ok {
			t.Errorf("handler got %T, want *customContext", c)
			return c.NoContent(http.StatusInternalServerError)
		}
		if d := echomw.DecisionFrom(cc); d != nil {
			results = len(d.Results)
		}
		return c.NoContent(http.StatusOK)
	}, echomw.MustMiddleware(eng, core.Use("inner")))
	g.GET("/outer", func(c echo.Context) error { return c.NoContent(http.StatusOK) })

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

// TestStackBehindNetHTTPLayer: an Echo server behind a net/http layer
// (nethttp.Middleware around it, one budget in each) makes one decision of
// the two layers, and the Echo layer's key function reads the Echo context
// although the net/http layer made the request's state.
func TestStackBehindNetHTTPLayer(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	user := echomw.Key(func(c echo.Context) (string, error) { s, _ := c.Get("user").(string); return s, nil })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: constKey},
		{Name: "inner", Algorithm: core.TokenBucket, Quota: 1, Window: time.Minute, Key: user},
	}})
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("user", c.QueryParam("user")); return next(c) }
	})
	e.GET("/both", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, echomw.MustMiddleware(eng, core.Use("inner")))
	h := nethttp.MustMiddleware(eng, core.Use("outer"))(e)

	if w := serveOnce(h, http.MethodGet, "/both?user=ann"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	w := serveOnce(h, http.MethodGet, "/both?user=ann")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request of ann: %d, want 429 from the inner layer", w.Code)
	}
	w = serveOnce(h, http.MethodGet, "/both?user=bob")
	if w.Code != http.StatusOK {
		t.Fatalf("first request of bob: %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"outer";r=3;`) {
		t.Errorf("bob's RateLimit %q, want outer r=3 (ann's denied request refunded)", got)
	}
}
