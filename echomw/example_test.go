package echomw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/keyfunc"
)

// A budget on every route and a stricter one on a write route: the two
// layers stack, and the response reports both budgets.
func Example() {
	store := core.MustMemoryStore(core.MemoryConfig{})
	defer store.Close()
	peerIP := keyfunc.PeerIP()
	eng := core.Must(core.Config{Store: store, Budgets: []core.Budget{
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
	store := core.MustMemoryStore(core.MemoryConfig{})
	defer store.Close()
	eng := core.Must(core.Config{Store: store, Budgets: []core.Budget{
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
