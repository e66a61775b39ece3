package adapter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
)

// An adapter for another router, here the toy router of
// example_router_test.go: one call limits it.
func Example() {
	var rt Router
	rt.Handle(http.MethodGet, "/", func(c *Ctx) { c.Send(http.StatusOK, nil) },
		LimitBy(1, time.Minute, keyfunc.PeerIP()))
	srv := httptest.NewServer(&rt)
	defer srv.Close()
	for range 2 {
		res, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "default";q=1;w=60
	// 429 "default";q=1;w=60
}

// A concurrency budget of one slot behind the toy router's Timeout: the
// first request's handler outlives the timeout (503), the router hands
// its context to other requests, and the slot comes back only when the
// handler returns; the second request is then served.
func Example_timeoutMiddleware() {
	eng := core.MustNew(core.Config{
		Store: memstore.MustNew(memstore.Config{}),
		Budgets: []core.Budget{
			{Name: "per_ip", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP()},
			{Name: "slots", Algorithm: core.Concurrency, Quota: 1, Window: time.Minute, Key: keyfunc.Constant("all")},
		},
	})
	release, innerDone := make(chan struct{}), make(chan struct{}, 2)
	afterInner := func(next HandlerFunc) HandlerFunc {
		return func(c *Ctx) {
			defer func() { innerDone <- struct{}{} }()
			next(c)
		}
	}
	slow := func(c *Ctx) {
		if c.Request().URL.Query().Has("slow") {
			<-release
		}
		c.Send(http.StatusOK, nil)
	}
	var rt Router
	rt.Handle(http.MethodGet, "/", slow, ForLayer(eng.MustLayer(core.Use("per_ip"))),
		Timeout(50*time.Millisecond), afterInner, ForLayer(eng.MustLayer(core.Use("slots"))))
	srv := httptest.NewServer(&rt)
	defer srv.Close()
	get := func(q string) string {
		res, err := http.Get(srv.URL + q)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		return fmt.Sprint(res.StatusCode, " ", resetField.ReplaceAllString(res.Header.Get("RateLimit"), ""))
	}
	fmt.Println("first: ", get("?slow"))
	close(release)
	<-innerDone // the inner layer has given its slot back
	fmt.Println("second:", get(""))
	// Output:
	// first:  503 "per_ip";r=99, "slots";r=0
	// second: 200 "per_ip";r=98, "slots";r=0
}

// resetField matches a RateLimit member's reset, which depends on the clock.
var resetField = regexp.MustCompile(`;t=\d+`)
