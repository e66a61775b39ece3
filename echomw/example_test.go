package echomw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/keyfunc"
)

// A budget on every route and a stricter one on a write route: the two
// layers stack, and the response reports both budgets.
func Example() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	peerIP := keyfunc.PeerIP()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "per_ip", Algorithm: core.TokenBucket, Quota: 60, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
		{Name: "writes", Algorithm: core.TokenBucket, Quota: 10, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
	}})

	e := echo.New()
	api := e.Group("/api", echomw.MustMiddleware(eng, core.Use("per_ip")))
	api.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	api.POST("/items", func(c echo.Context) error { return c.NoContent(http.StatusCreated) },
		echomw.MustMiddleware(eng, core.Use("writes")))

	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/items", nil))
	fmt.Println(w.Code, w.Header().Get("RateLimit"))
	// Output: 201 "per_ip";r=59;t=1, "writes";r=9;t=6
}

// A handler reads the decision, for example to log the remaining quota.
func ExampleDecisionFrom() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "per_ip", Quota: 100, Window: time.Hour, Key: keyfunc.PeerIP()},
	}})
	e := echo.New()
	e.Use(echomw.MustMiddleware(eng, core.Use("per_ip")))
	e.GET("/", func(c echo.Context) error {
		d := echomw.DecisionFrom(c)
		fmt.Println(d.Results[0].Budget, d.Results[0].Remaining)
		return nil
	})
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	// Output: per_ip 99
}

// The one-call start, with Echo's own conventions: a Skipper for health
// checks, and denials handed to the app's HTTPErrorHandler.
func ExampleLimitBy() {
	e := echo.New()
	e.Use(echomw.LimitBy(1, time.Minute, keyfunc.PeerIP(),
		echomw.Skipper(func(c echo.Context) bool { return c.Path() == "/healthz" }),
		echomw.DenyAsError()))
	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/a", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		fmt.Println("error handler:", err)
		_ = c.NoContent(err.(*echo.HTTPError).Code)
	}
	for _, path := range []string{"/healthz", "/a", "/a"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, w.Code, w.Header().Get("Retry-After") != "")
	}
	// Output:
	// /healthz 200 false
	// /a 200 false
	// error handler: code=429, message=Too Many Requests
	// /a 429 true
}

// Brute-force protection on a login route: only failed logins (401) count.
func ExampleLimitBy_login() {
	e := echo.New()
	e.POST("/login", func(c echo.Context) error {
		if c.FormValue("password") != "secret" {
			return echo.ErrUnauthorized
		}
		return c.NoContent(http.StatusOK)
	}, echomw.LimitBy(2, 15*time.Minute, keyfunc.PeerIP(),
		core.CountWhen(func(status int) bool { return status == http.StatusUnauthorized })))
	for _, password := range []string{"secret", "a", "secret", "b", "secret"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/login?password="+password, nil)
		e.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 401 200 401 429
}
