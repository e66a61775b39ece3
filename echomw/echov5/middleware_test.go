package echov5_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/keyfunc"
)

// countingStore counts the store calls of an engine.
type countingStore struct {
	core.Store
	takes atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	s.takes.Add(1)
	return s.Store.Take(ctx, items, out)
}

// oneBudget returns an engine with one budget "b" of quota requests per
// minute keyed by key, and its store.
func oneBudget(t *testing.T, quota int64, key core.KeyFunc) (*core.Engine, *countingStore) {
	t.Helper()
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	st := &countingStore{Store: ms}
	return core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "b", Algorithm: core.TokenBucket, Quota: quota, Window: time.Minute, Key: key},
	}}), st
}

func constKey(*core.Request) (string, error) { return "k", nil }

func serveOnce(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

func TestMiddlewareConfigErrors(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	mw, err := echov5.Middleware(eng, core.Use("nope"))
	var ce *core.ConfigError
	if mw != nil || !errors.As(err, &ce) {
		t.Fatalf("Middleware with an unknown budget: %v, %v; want nil and a *core.ConfigError", mw != nil, err)
	}
	if _, err := echov5.Middleware(eng); err == nil {
		t.Error("Middleware without budgets: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustMiddleware with an unknown budget did not panic")
		}
	}()
	echov5.MustMiddleware(eng, core.Use("nope"))
}

// TestSkipper checks that a skipped request reaches the handler without a
// store call or a rate-limit header field, and that Echo's own
// middleware.Skipper type is accepted.
func TestSkipper(t *testing.T) {
	eng, st := oneBudget(t, 5, constKey)
	var healthz middleware.Skipper = func(c *echo.Context) bool { return c.Path() == "/healthz" }
	e := echo.New()
	e.Use(echov5.MustMiddleware(eng, core.Use("b"), echov5.Skipper(healthz)))
	ok := func(c *echo.Context) error { return c.String(http.StatusOK, "ok") }
	e.GET("/healthz", ok)
	e.GET("/x", ok)

	for range 7 { // more than the quota
		w := serveOnce(e, http.MethodGet, "/healthz")
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Fatalf("skipped request: %d %q", w.Code, w.Body)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy"} {
			if v := w.Header().Get(f); v != "" {
				t.Fatalf("skipped request has %s: %q", f, v)
			}
		}
	}
	if n := st.takes.Load(); n != 0 {
		t.Errorf("skipped requests made %d store calls, want 0", n)
	}
	w := serveOnce(e, http.MethodGet, "/x")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"b";r=4;`) || st.takes.Load() != 1 {
		t.Errorf("limited request: RateLimit %q after %d store calls; want r=4 after 1", got, st.takes.Load())
	}
}

// seenByErrorHandler is what an app's HTTPErrorHandler saw.
type seenByErrorHandler struct {
	err                        error
	rateLimit, retryAfter, pol string
	problemType, cacheControl  string
}

// errorHandlerApp returns an Echo app whose HTTPErrorHandler records what
// it sees and answers with its own JSON body, and the counter of handler
// runs of GET /x.
func errorHandlerApp(mw echo.MiddlewareFunc) (*echo.Echo, *[]seenByErrorHandler, *int) {
	e := echo.New()
	var seen []seenByErrorHandler
	var runs int
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		h := c.Response().Header()
		seen = append(seen, seenByErrorHandler{err, h.Get("RateLimit"), h.Get("Retry-After"),
			h.Get("RateLimit-Policy"), h.Get("Content-Type"), h.Get("Cache-Control")})
		h.Del("Content-Type") // the denial's problem+json type; this app answers JSON
		_ = c.JSON(echo.StatusCode(err), map[string]string{"error": "slow down"})
	}
	e.GET("/x", func(c *echo.Context) error { runs++; return c.NoContent(http.StatusOK) }, mw)
	return e, &seen, &runs
}

// TestDenyAsError checks that a denial reaches the app's HTTPErrorHandler
// as an *echo.HTTPError with 429, with the rate-limit header fields and
// Retry-After already set, and that the handler does not run.
func TestDenyAsError(t *testing.T) {
	eng, _ := oneBudget(t, 1, constKey)
	e, seen, runs := errorHandlerApp(echov5.MustMiddleware(eng, core.Use("b"), echov5.DenyAsError()))
	if w := serveOnce(e, http.MethodGet, "/x"); w.Code != http.StatusOK || len(*seen) != 0 {
		t.Fatalf("first request: %d, error handler calls %d", w.Code, len(*seen))
	}
	w := serveOnce(e, http.MethodGet, "/x")
	if w.Code != http.StatusTooManyRequests || w.Body.String() != `{"error":"slow down"}`+"\n" || *runs != 1 {
		t.Fatalf("denied request: %d %q, handler runs %d; want 429 from the error handler and 1 run", w.Code, w.Body, *runs)
	}
	if len(*seen) != 1 {
		t.Fatalf("error handler calls %d, want 1", len(*seen))
	}
	s := (*seen)[0]
	var he *echo.HTTPError
	if !errors.As(s.err, &he) || he.Code != http.StatusTooManyRequests || he.Message != "Too Many Requests" {
		t.Errorf("error handler got %#v, want an *echo.HTTPError 429 Too Many Requests", s.err)
	}
	if !strings.HasPrefix(s.rateLimit, `"b";r=0;`) || s.retryAfter == "" || s.pol != `"b";q=1;w=60` {
		t.Errorf("in the error handler: RateLimit %q, Retry-After %q, RateLimit-Policy %q", s.rateLimit, s.retryAfter, s.pol)
	}
	if w.Header().Get("Retry-After") != s.retryAfter || w.Header().Get("RateLimit") != s.rateLimit {
		t.Errorf("response header %v lost the fields set before the error handler", w.Header())
	}
}

// TestDenyHandler checks that DenyHandler answers a denial with what it
// knows of it, either by rendering with Echo (c.JSON) or by returning an
// error for the app's HTTPErrorHandler, with the fields already set.
func TestDenyHandler(t *testing.T) {
	t.Run("renders", func(t *testing.T) {
		eng, _ := oneBudget(t, 1, constKey)
		e := echo.New()
		e.GET("/x", func(c *echo.Context) error { return c.NoContent(http.StatusOK) },
			echov5.MustMiddleware(eng, core.Use("b"), echov5.DenyHandler(func(c *echo.Context, d *core.Decision) error {
				c.Response().Header().Del("Content-Type")
				return c.JSON(http.StatusTooManyRequests, map[string]any{
					"denied_by": d.DeniedBy, "limited": d.Reason == core.ReasonRateLimited, "retry_s": d.RetryAfter.Seconds() > 0,
				})
			})))
		serveOnce(e, http.MethodGet, "/x")
		w := serveOnce(e, http.MethodGet, "/x")
		if w.Code != http.StatusTooManyRequests || w.Body.String() != `{"denied_by":"b","limited":true,"retry_s":true}`+"\n" {
			t.Fatalf("denied request: %d %q", w.Code, w.Body)
		}
		if w.Header().Get("Retry-After") == "" || !strings.HasPrefix(w.Header().Get("RateLimit"), `"b";r=0;`) ||
			w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("denied request's header %v", w.Header())
		}
	})
	t.Run("returns an error", func(t *testing.T) {
		eng, _ := oneBudget(t, 1, constKey)
		errLimited := errors.New("limited")
		var gotDecision bool
		e, seen, runs := errorHandlerApp(echov5.MustMiddleware(eng, core.Use("b"),
			echov5.DenyHandler(func(c *echo.Context, d *core.Decision) error {
				gotDecision = !d.Allowed && d.DeniedBy == "b"
				return echo.ErrTooManyRequests.Wrap(errLimited)
			})))
		serveOnce(e, http.MethodGet, "/x")
		w := serveOnce(e, http.MethodGet, "/x")
		if w.Code != http.StatusTooManyRequests || *runs != 1 || !gotDecision || len(*seen) != 1 {
			t.Fatalf("denied request: %d, handler runs %d, DenyHandler saw the denial %v, error handler calls %d",
				w.Code, *runs, gotDecision, len(*seen))
		}
		s := (*seen)[0]
		if !errors.Is(s.err, errLimited) || s.retryAfter == "" || !strings.HasPrefix(s.rateLimit, `"b";r=0;`) {
			t.Errorf("error handler saw %v, Retry-After %q, RateLimit %q", s.err, s.retryAfter, s.rateLimit)
		}
		if s.problemType != "application/problem+json" || s.cacheControl == "" {
			t.Errorf("error handler saw Content-Type %q, Cache-Control %q; want the denial's fields", s.problemType, s.cacheControl)
		}
	})
}

// TestKey checks a budget keyed by an Echo context value that an
// authentication middleware set, and the missing key (no user: 401).
func TestKey(t *testing.T) {
	eng, _ := oneBudget(t, 1, echov5.Key(func(c *echo.Context) (string, error) {
		if u, ok := c.Get("user").(string); ok {
			return u, nil
		}
		return "", core.ErrNoKey
	}))
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if u := c.Request().Header.Get("X-User"); u != "" {
				c.Set("user", u)
			}
			return next(c)
		}
	}, echov5.MustMiddleware(eng, core.Use("b")))
	e.GET("/x", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	get := func(user string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		e.ServeHTTP(w, r)
		return w.Code
	}
	for i, c := range []struct {
		user string
		want int
	}{{"ann", 200}, {"ann", 429}, {"bob", 200}, {"bob", 429}} {
		if got := get(c.user); got != c.want {
			t.Errorf("request %d as %q: %d, want %d", i, c.user, got, c.want)
		}
	}
	// No user: no key (not a credential), so the default denial: 400.
	if got := get(""); got != http.StatusBadRequest {
		t.Errorf("request without a user: %d, want 400", got)
	}
	// Outside an Echo v5 request, the key function reports a missing key.
	k := echov5.Key(func(*echo.Context) (string, error) { return "x", nil })
	if _, err := k(&core.Request{}); !errors.Is(err, core.ErrNoKey) {
		t.Errorf("Key on a request not from Echo: %v, want core.ErrNoKey", err)
	}
}

// TestPanic checks a handler that panics inside a layer, behind Echo's own
// Recover: the client gets Echo's 500 with the layer's header fields, the
// request keeps its charge, and the next request is limited as usual.
func TestPanic(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	e := echo.New()
	var handled error
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		handled = err
		echo.DefaultHTTPErrorHandler(false)(c, err)
	}
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
	e.Use(echov5.MustMiddleware(eng, core.Use("b")))
	e.GET("/boom", func(*echo.Context) error { panic("boom") })
	e.GET("/x", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })

	w := serveOnce(e, http.MethodGet, "/boom")
	if w.Code != http.StatusInternalServerError || handled == nil || !strings.Contains(handled.Error(), "boom") {
		t.Fatalf("panicking handler: %d, error handler got %v", w.Code, handled)
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"b";r=4;`) {
		t.Errorf("panicking handler's RateLimit %q, want r=4", got)
	}
	w = serveOnce(e, http.MethodGet, "/x")
	if got := w.Header().Get("RateLimit"); w.Code != http.StatusOK || !strings.HasPrefix(got, `"b";r=3;`) {
		t.Errorf("next request: %d, RateLimit %q; want 200 with the panic's charge kept (r=3)", w.Code, got)
	}
}

// TestCountWhen checks the login case: only 401 answers count, whether
// the handler returns an *echo.HTTPError, one of Echo's status errors, or
// writes the 401 itself.
func TestCountWhen(t *testing.T) {
	for _, c := range []struct {
		name string
		fail func(c *echo.Context) error
	}{
		{"HTTPError", func(*echo.Context) error { return echo.NewHTTPError(http.StatusUnauthorized, "bad password") }},
		{"ErrUnauthorized", func(*echo.Context) error { return echo.ErrUnauthorized }},
		{"written", func(c *echo.Context) error { return c.NoContent(http.StatusUnauthorized) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng, _ := oneBudget(t, 2, keyfunc.PeerIP())
			e := echo.New()
			e.POST("/login", func(ec *echo.Context) error {
				if ec.QueryParam("password") != "right" {
					return c.fail(ec)
				}
				return ec.NoContent(http.StatusNoContent)
			}, echov5.MustMiddleware(eng, core.Use("b"),
				core.CountWhen(func(status int) bool { return status == http.StatusUnauthorized })))
			want := []struct {
				password string
				status   int
			}{
				{"right", 204}, {"right", 204}, {"right", 204}, // successes give their charge back
				{"wrong", 401}, {"right", 204}, {"wrong", 401}, // two failures spend the quota of 2
				{"right", 429}, {"wrong", 429},
			}
			for i, w := range want {
				got := serveOnce(e, http.MethodPost, "/login?password="+w.password)
				if got.Code != w.status {
					t.Fatalf("attempt %d (%s password): %d, want %d", i, w.password, got.Code, w.status)
				}
			}
		})
	}
}

// TestLimitBy checks the one-call start with one of this package's
// options: per-IP counting, the default denial, and a skipped route.
func TestLimitBy(t *testing.T) {
	e := echo.New()
	e.Use(echov5.LimitBy(2, time.Hour, keyfunc.PeerIP(),
		echov5.Skipper(func(c *echo.Context) bool { return c.Path() == "/healthz" })))
	e.GET("/x", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/healthz", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	from := func(path, addr string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = addr
		e.ServeHTTP(w, r)
		return w
	}
	for i, want := range []int{200, 200, 429} {
		w := from("/x", "192.0.2.1:1000")
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
		if want == 429 && (w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") == "") {
			t.Errorf("denial's header %v, want problem+json and Retry-After", w.Header())
		}
	}
	if w := from("/x", "192.0.2.2:1000"); w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != `"default";q=2;w=3600` {
		t.Errorf("another IP: %d %v", w.Code, w.Header())
	}
	if w := from("/healthz", "192.0.2.1:1000"); w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
		t.Errorf("skipped route of a limited IP: %d %v", w.Code, w.Header())
	}
}

// TestDecisionFrom checks that the handler reads the request's decision,
// and that there is none outside a layer: before it, and after the request
// finished (the state is pooled), which includes Echo's HTTP error handler.
func TestDecisionFrom(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	e := echo.New()
	var before, after *core.Decision
	inErrorHandler := &core.Decision{}
	remaining := int64(-1)
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		inErrorHandler = echov5.DecisionFrom(c)
		_ = c.NoContent(http.StatusTeapot)
	}
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			before = echov5.DecisionFrom(c)
			err := next(c)
			after = echov5.DecisionFrom(c)
			return err
		}
	})
	e.Use(echov5.MustMiddleware(eng, core.Use("b")))
	e.GET("/x", func(c *echo.Context) error {
		if d := echov5.DecisionFrom(c); d != nil && d.Allowed && len(d.Results) == 1 && d.Results[0].Budget == "b" {
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
	if echov5.DecisionFrom(nil) != nil {
		t.Error("DecisionFrom(nil) is not nil")
	}
}

type ctxKey struct{}

// TestRouteAndValues checks what key functions see in Echo v5: the route
// pattern in server (e.Use) and group middleware, Echo's context values
// (string keys) and values of the request's context.
func TestRouteAndValues(t *testing.T) {
	type seen struct {
		route, path string
		val, ctx    any
	}
	var got []seen
	eng, _ := oneBudget(t, 5, func(r *core.Request) (string, error) {
		got = append(got, seen{r.Route, r.Path, r.Value("tenant"), r.Value(ctxKey{})})
		return "k", nil
	})
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			c.Set("tenant", "from-values")
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), ctxKey{}, "from-context")))
			return next(c)
		}
	}, echov5.MustMiddleware(eng, core.Use("b")))
	api := e.Group("/api", echov5.MustMiddleware(eng, core.Use("b")))
	api.GET("/users/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })

	if w := serveOnce(e, http.MethodGet, "/api/users/42"); w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	want := seen{"/api/users/:id", "/api/users/42", "from-values", "from-context"}
	if len(got) != 2 || got[0] != want || got[1] != want {
		t.Errorf("key function saw %+v, want [%+v] in the server's and the group's layer", got, want)
	}

	// e.Pre middleware runs before routing: no route yet.
	got = nil
	e = echo.New()
	e.Pre(echov5.MustMiddleware(eng, core.Use("b")))
	e.GET("/users/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	if w := serveOnce(e, http.MethodGet, "/users/7"); w.Code != http.StatusOK || len(got) != 1 || got[0].route != "" || got[0].path != "/users/7" {
		t.Errorf("in e.Pre: %d, key function saw %+v; want an empty route", w.Code, got)
	}
}

// TestRequestKeptPastItsEnd checks a request whose layers already finished
// (a handler kept it and served it again): it is served without limiting
// rather than touching recycled state.
func TestRequestKeptPastItsEnd(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	e := echo.New()
	e.Use(echov5.MustMiddleware(eng, core.Use("b")))
	var kept *http.Request
	e.GET("/x", func(c *echo.Context) error {
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
