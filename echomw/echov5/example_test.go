package echov5_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/keyfunc"
)

// Each client IP may send 2 requests a minute; the third is denied.
func Example() {
	e := echo.New()
	e.Use(echov5.LimitBy(2, time.Minute, keyfunc.PeerIP()))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })

	for range 3 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Content-Type"))
	}
	// Output:
	// 200 "default";q=2;w=60 text/plain; charset=UTF-8
	// 200 "default";q=2;w=60 text/plain; charset=UTF-8
	// 429 "default";q=2;w=60 application/problem+json
}

// Health checks are not limited: no budget is charged and no rate-limit
// header field is written.
func ExampleSkipper() {
	e := echo.New()
	e.Use(echov5.LimitBy(100, time.Minute, keyfunc.PeerIP(),
		echov5.Skipper(func(c *echo.Context) bool { return c.Path() == "/healthz" })))
	e.GET("/healthz", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) })

	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	fmt.Printf("%d %q\n", w.Code, w.Header().Get("RateLimit"))
	// Output: 204 ""
}

// A login route counts only failed attempts (401): 3 per minute per IP.
// Successful logins give their charge back.
func ExampleLimitBy_login() {
	e := echo.New()
	e.POST("/login", func(c *echo.Context) error {
		if c.FormValue("password") != "right" {
			return echo.ErrUnauthorized
		}
		return c.NoContent(http.StatusNoContent)
	}, echov5.LimitBy(3, time.Minute, keyfunc.PeerIP(),
		core.CountWhen(func(status int) bool { return status == http.StatusUnauthorized })))

	for _, password := range []string{"right", "right", "right", "right", "wrong", "wrong", "wrong", "right"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login?password="+password, nil))
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 204 204 204 204 401 401 401 429
}

// A budget on every route and a stricter one on a write route: the two
// layers stack, and the response reports both budgets.
func ExampleMiddleware() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	peerIP := keyfunc.PeerIP()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "per_ip", Algorithm: core.TokenBucket, Quota: 60, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
		{Name: "writes", Algorithm: core.TokenBucket, Quota: 10, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
	}})

	e := echo.New()
	api := e.Group("/api", echov5.MustMiddleware(eng, core.Use("per_ip")))
	api.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })
	api.POST("/items", func(c *echo.Context) error { return c.NoContent(http.StatusCreated) },
		echov5.MustMiddleware(eng, core.Use("writes")))

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
	e.Use(echov5.MustMiddleware(eng, core.Use("per_ip")))
	e.GET("/", func(c *echo.Context) error {
		d := echov5.DecisionFrom(c)
		fmt.Println(d.Results[0].Budget, d.Results[0].Remaining)
		return nil
	})
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	// Output: per_ip 99
}
