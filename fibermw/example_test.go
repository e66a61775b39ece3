package fibermw_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw"
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

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	api := app.Group("/api", fibermw.MustMiddleware(eng, core.Use("per_ip")))
	api.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("hello") })
	api.Post("/items", fibermw.MustMiddleware(eng, core.Use("writes")), func(c *fiber.Ctx) error {
		return c.SendStatus(http.StatusCreated)
	})

	res, err := app.Test(httptest.NewRequest(http.MethodPost, "/api/items", nil), -1)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("RateLimit"))
	// Output: 201 "per_ip";r=59;t=1, "writes";r=9;t=6
}

// A handler reads the decision, for example to log the remaining quota.
func ExampleDecisionFrom() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "per_ip", Quota: 100, Window: time.Hour, Key: keyfunc.PeerIP()},
	}})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fibermw.MustMiddleware(eng, core.Use("per_ip")))
	app.Get("/", func(c *fiber.Ctx) error {
		d := fibermw.DecisionFrom(c)
		fmt.Println(d.Results[0].Budget, d.Results[0].Remaining)
		return nil
	})
	if res, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1); err == nil {
		res.Body.Close()
	}
	// Output: per_ip 99
}

// The one-call start, with Fiber's own conventions: Next skips health
// checks, and only failed logins count (SkipSuccessfulRequests).
func ExampleLimitBy() {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fibermw.LimitBy(2, 15*time.Minute, keyfunc.PeerIP(),
		fibermw.Next(func(c *fiber.Ctx) bool { return c.Path() == "/healthz" }),
		fibermw.SkipSuccessfulRequests()))
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
	app.Post("/login", func(c *fiber.Ctx) error {
		if c.Query("password") != "secret" {
			return fiber.ErrUnauthorized
		}
		return c.SendStatus(http.StatusOK)
	})
	for _, path := range []string{"/healthz", "/login?password=secret", "/login?password=a", "/login?password=secret", "/login?password=b", "/login?password=secret"} {
		method := http.MethodPost
		if path == "/healthz" {
			method = http.MethodGet
		}
		res, err := app.Test(httptest.NewRequest(method, path, nil), -1)
		if err != nil {
			fmt.Println(err)
			return
		}
		res.Body.Close()
		fmt.Print(res.StatusCode, " ")
	}
	fmt.Println()
	// Output: 200 200 401 200 401 429
}

// A server that answers slow and silent clients: the app's config bounds
// a request's header and body, an answer and an idle connection, and
// Listen serves it in place of app.Listen. (This example is not run: it
// serves until the process ends.)
func ExampleListen() {
	app := fiber.New(fiber.Config{ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute})
	app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })
	log.Fatal(fibermw.Listen(app, ":8080"))
}

// Serve serves on a listener of one's own, here a free loopback port, in
// place of app.Listener.
func ExampleServe() {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute})
	app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- fibermw.Serve(app, ln) }()
	defer func() { _ = app.Shutdown(); <-done }()

	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, string(body))
	// Output: 200 hello
}
