package echomw_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/internal/adaptertest"
)

// serveEcho serves a catch-all route behind mw; errs receives what the
// app's HTTPErrorHandler is given.
func serveEcho(t *testing.T, mw echo.MiddlewareFunc, errs chan<- error) string {
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if errs != nil {
			errs <- err
		}
		var he *echo.HTTPError
		if errors.As(err, &he) {
			_ = c.String(he.Code, "rendered by the app")
			return
		}
		_ = c.NoContent(http.StatusInternalServerError)
	}
	e.Use(middleware.Recover(), func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("user", c.Request().Header.Get("X-User")); return next(c) }
	}, mw)
	e.GET("/*", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A skipped request reaches the handler without a store call or a
// rate-limit field, and needs no key.
func TestSkipper(t *testing.T) {
	eng, store := adaptertest.Engine(t, 1, nil)
	url := serveEcho(t, echomw.MustMiddleware(eng, core.Use("b"),
		echomw.Skipper(middleware.Skipper(func(c echo.Context) bool { return c.Request().URL.Path == "/healthz" }))), nil)
	for range 3 {
		adaptertest.WantSkipped(t, adaptertest.Get(t, url, "/healthz", ""), "/healthz")
	}
	if n := store.Takes(); n != 0 {
		t.Fatalf("skipped requests made %d store calls", n)
	}
	if r := adaptertest.Get(t, url, "/a", "k"); r.Status != 200 || store.Takes() != 1 {
		t.Fatalf("limited request: %d after %d store calls", r.Status, store.Takes())
	}
}

// DenyAsError hands a denial to the app's HTTPErrorHandler as an
// *echo.HTTPError, with the rate-limit fields and Retry-After set.
func TestDenyAsError(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, nil)
	errs := make(chan error, 2)
	url := serveEcho(t, echomw.MustMiddleware(eng, core.Use("b"), echomw.DenyAsError()), errs)
	if r := adaptertest.Get(t, url, "/", "k"); r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	adaptertest.WantDenied(t, adaptertest.Get(t, url, "/", "k"), 429, "rendered by the app", "second request")
	var he *echo.HTTPError
	if err := <-errs; !errors.As(err, &he) || he.Code != http.StatusTooManyRequests {
		t.Fatalf("HTTPErrorHandler got %v, want an *echo.HTTPError with 429", err)
	}
}

// DenyHandler answers a denial itself, knowing why from the decision.
func TestDenyHandler(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, nil)
	url := serveEcho(t, echomw.MustMiddleware(eng, core.Use("b"), echomw.DenyHandler(func(c echo.Context, d *core.Decision) error {
		return c.String(http.StatusTooManyRequests, "slow down, "+d.DeniedBy)
	})), nil)
	adaptertest.Get(t, url, "/", "k")
	adaptertest.WantDenied(t, adaptertest.Get(t, url, "/", "k"), 429, "slow down, b", "second request")
}

// Key reads the echo.Context: here a user an earlier middleware set.
func TestKey(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, echomw.Key(func(c echo.Context) (string, error) {
		if u, _ := c.Get("user").(string); u != "" {
			return u, nil
		}
		return "", core.ErrNoKey
	}))
	url := serveEcho(t, echomw.MustMiddleware(eng, core.Use("b")), nil)
	get := func(user string) int {
		req, _ := http.NewRequest(http.MethodGet, url+"/", nil)
		req.Header.Set("X-User", user)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if a1, a2, b1 := get("alice"), get("alice"), get("bob"); a1 != 200 || a2 != 429 || b1 != 200 {
		t.Fatalf("alice %d then %d, bob %d; want 200, 429, 200", a1, a2, b1)
	}
}
