package echomw_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw"
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
	mw, err := echomw.Middleware(eng, core.Use("nope"))
	var ce *core.ConfigError
	if mw != nil || !errors.As(err, &ce) {
		t.Fatalf("Middleware with an unknown budget: %v, %v; want nil and a *core.ConfigError", mw != nil, err)
	}
	if _, err := echomw.Middleware(eng); err == nil {
		t.Error("Middleware without budgets: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustMiddleware with an unknown budget did not panic")
		}
	}()
	echomw.MustMiddleware(eng, core.Use("nope"))
}

func serveOnce(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

// TestDecisionFrom checks that the handler reads the request's decision,
// and that there is none outside a layer: before it, and after the request
// finished (the state is pooled), which includes Echo's HTTP error handler.
func TestDecisionFrom(t *testing.T) {
	eng := oneBudget(t, constKey)
	e := echo.New()
	var before, after *core.Decision
	inErrorHandler := &core.Decision{}
	remaining := int64(-1)
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		inErrorHandler = echomw.DecisionFrom(c)
		_ = c.NoContent(http.StatusTeapot)
	}
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			before = echomw.DecisionFrom(c)
			err := next(c)
			after = echomw.DecisionFrom(c)
			return err
		}
	})
	e.Use(echomw.MustMiddleware(eng, core.Use("b")))
	e.GET("/x", func(c echo.Context) error {
		if d := echomw.DecisionFrom(c); d != nil && d.Allowed && len(d.Results) == 1 && d.Results[0].Budget == "b" {
			remaining = d.Results[0].Remaining
		}
		return errors.New("handler failed")
	})
	if w := serveOnce(e, http.MethodGet, "/x"); w.Code != http.StatusTeapot {
		t.Fatalf("status %d", w.Code)
	}
	if remaining != 4 {
		t.Errorf("handler read remaining %d, want an allowed decision with b at 4", remaining)
	}
	if before != nil || after != nil || inErrorHandler != nil {
		t.Errorf("DecisionFrom before the layer %v, after it %v, in the error handler %v; want nil", before, after, inErrorHandler)
	}
	if echomw.DecisionFrom(nil) != nil {
		t.Error("DecisionFrom(nil) is not nil")
	}
}

type ctxKey struct{}

// TestRouteAndValues checks what key functions see in Echo: the route
// pattern in group middleware, Echo's context values (string keys) and
// values of the request's context.
func TestRouteAndValues(t *testing.T) {
	type seen struct {
		route, path string
		val, ctx    any
	}
	var got []seen
	eng := oneBudget(t, func(r *core.Request) (string, error) {
		got = append(got, seen{r.Route, r.Path, r.Value("tenant"), r.Value(ctxKey{})})
		return "k", nil
	})
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set("tenant", "from-values")
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), ctxKey{}, "from-context")))
			return next(c)
		}
	})
	api := e.Group("/api", echomw.MustMiddleware(eng, core.Use("b")))
	api.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })

	if w := serveOnce(e, http.MethodGet, "/api/users/42"); w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	want := seen{"/api/users/:id", "/api/users/42", "from-values", "from-context"}
	if len(got) != 1 || got[0] != want {
		t.Errorf("key function saw %+v, want [%+v]", got, want)
	}
}

// TestRequestKeptPastItsEnd checks a request whose layers already finished
// (a handler kept it and served it again): it is served without limiting
// rather than touching recycled state.
func TestRequestKeptPastItsEnd(t *testing.T) {
	eng := oneBudget(t, constKey)
	e := echo.New()
	e.Use(echomw.MustMiddleware(eng, core.Use("b")))
	var kept *http.Request
	e.GET("/x", func(c echo.Context) error {
		if kept == nil {
			kept = c.Request()
		}
		return c.NoContent(http.StatusOK)
	})
	w := serveOnce(e, http.MethodGet, "/x")
	if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
		t.Fatalf("first request: %d %v", w.Code, w.Header())
	}
	w = httptest.NewRecorder()
	e.ServeHTTP(w, kept)
	if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
		t.Errorf("kept request: %d %v; want 200 without rate-limit fields", w.Code, w.Header())
	}
	w = serveOnce(e, http.MethodGet, "/x")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"b";r=3;`) {
		t.Errorf("next request: RateLimit %q, want the kept request uncounted (r=3)", got)
	}
}
