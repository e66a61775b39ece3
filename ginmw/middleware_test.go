package ginmw_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/ginmw"
)

// oneBudget returns an engine with one budget keyed by key.
func oneBudget(t *testing.T, key core.KeyFunc) *core.Engine {
	t.Helper()
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	return core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "b", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: key},
	}})
}

func constKey(*core.Request) (string, error) { return "k", nil }

func TestMiddlewareConfigErrors(t *testing.T) {
	eng := oneBudget(t, constKey)
	mw, err := ginmw.Middleware(eng, core.Use("nope"))
	var ce *core.ConfigError
	if mw != nil || !errors.As(err, &ce) {
		t.Fatalf("Middleware with an unknown budget: %v, %v; want nil and a *core.ConfigError", mw != nil, err)
	}
	if _, err := ginmw.Middleware(eng); err == nil {
		t.Error("Middleware without budgets: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustMiddleware with an unknown budget did not panic")
		}
	}()
	ginmw.MustMiddleware(eng, core.Use("nope"))
}

func serveOnce(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	req := httptest.NewRequest(method, target, nil)
	h.ServeHTTP(w, req)
	return w
}

// TestDecisionFrom checks that the handler reads the request's decision,
// and that there is none outside a layer: before it, and after the request
// finished (the state is pooled).
func TestDecisionFrom(t *testing.T) {
	eng := oneBudget(t, constKey)
	r := gin.New()
	var before, after *core.Decision
	remaining := int64(-1)
	r.Use(func(c *gin.Context) {
		before = ginmw.DecisionFrom(c)
		c.Next()
		after = ginmw.DecisionFrom(c)
	})
	r.Use(ginmw.MustMiddleware(eng, core.Use("b")))
	r.GET("/x", func(c *gin.Context) {
		if d := ginmw.DecisionFrom(c); d != nil && d.Allowed && len(d.Results) == 1 && d.Results[0].Budget == "b" {
			remaining = d.Results[0].Remaining
		}
		c.Status(http.StatusNoContent)
	})
	if w := serveOnce(r, http.MethodGet, "/x"); w.Code != http.StatusNoContent {
		t.Fatalf("status %d", w.Code)
	}
	if remaining != 4 {
		t.Errorf("handler read remaining %d, want an allowed decision with b at 4", remaining)
	}
	if before != nil || after != nil {
		t.Errorf("DecisionFrom before the layer %v, after the request %v; want nil", before, after)
	}
	if ginmw.DecisionFrom(nil) != nil {
		t.Error("DecisionFrom(nil) is not nil")
	}
}

type keysKey struct{}
type ctxKey struct{}

// TestRouteAndValues checks what key functions see in Gin: the route
// pattern in group middleware and in engine-wide middleware (empty for an
// unmatched path), Gin keys under any key type, and values of the
// request's context.
func TestRouteAndValues(t *testing.T) {
	type seen struct {
		route, path string
		key, ctx    any
	}
	var got []seen
	eng := oneBudget(t, func(r *core.Request) (string, error) {
		got = append(got, seen{r.Route, r.Path, r.Value(keysKey{}), r.Value(ctxKey{})})
		return "k", nil
	})
	mw := ginmw.MustMiddleware(eng, core.Use("b"))
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Set(keysKey{}, "from-keys")
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), ctxKey{}, "from-context"))
		c.Next()
	})
	r.Use(mw)
	api := r.Group("/api")
	api.GET("/users/:id", func(c *gin.Context) { c.Status(http.StatusOK) })

	serveOnce(r, http.MethodGet, "/api/users/42")
	serveOnce(r, http.MethodGet, "/nowhere")
	want := []seen{
		{"/api/users/:id", "/api/users/42", "from-keys", "from-context"},
		{"", "/nowhere", "from-keys", "from-context"},
	}
	if len(got) != len(want) {
		t.Fatalf("key function ran %d times, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: key function saw %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestRequestKeptPastItsEnd checks a request whose layers already finished
// (a handler kept it and served it again): it is served without limiting
// rather than touching recycled state.
func TestRequestKeptPastItsEnd(t *testing.T) {
	eng := oneBudget(t, constKey)
	r := gin.New()
	r.Use(ginmw.MustMiddleware(eng, core.Use("b")))
	var kept *http.Request
	r.GET("/x", func(c *gin.Context) {
		if kept == nil {
			kept = c.Request
		}
		c.Status(http.StatusOK)
	})
	w := serveOnce(r, http.MethodGet, "/x")
	if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
		t.Fatalf("first request: %d %v", w.Code, w.Header())
	}
	w = httptest.NewRecorder()
	r.ServeHTTP(w, kept)
	if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
		t.Errorf("kept request: %d %v; want 200 without rate-limit fields", w.Code, w.Header())
	}
	w = serveOnce(r, http.MethodGet, "/x")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"b";r=3;`) {
		t.Errorf("next request: RateLimit %q, want the kept request uncounted (r=3)", got)
	}
}
