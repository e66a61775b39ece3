package fiberv3_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/keyfunc"
)

// One call: 100 requests per minute for each client IP (the connection's
// peer), on every route.
func Example() {
	app := fiber.New()
	app.Use(fiberv3.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })

	res, err := app.Test(httptest.NewRequest(http.MethodGet, "/hello", nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("RateLimit-Policy"))
	// Output: 200 "default";q=100;w=60
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

	app := fiber.New()
	api := app.Group("/api", fiberv3.MustMiddleware(eng, core.Use("per_ip")))
	api.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })
	api.Post("/items", fiberv3.MustMiddleware(eng, core.Use("writes")), func(c fiber.Ctx) error {
		return c.SendStatus(http.StatusCreated)
	})

	res, err := app.Test(httptest.NewRequest(http.MethodPost, "/api/items", nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("RateLimit"))
	// Output: 201 "per_ip";r=59;t=1, "writes";r=9;t=6
}

// A login route where only failed attempts count: five per minute per
// client IP.
func ExampleSkipSuccessfulRequests() {
	app := fiber.New()
	app.Post("/login", fiberv3.LimitBy(5, time.Minute, keyfunc.PeerIP(), fiberv3.SkipSuccessfulRequests()),
		func(c fiber.Ctx) error {
			if c.FormValue("password") != "secret" {
				return fiber.NewError(fiber.StatusUnauthorized, "wrong password")
			}
			return c.SendString("welcome")
		})

	for range 6 {
		res, err := app.Test(httptest.NewRequest(http.MethodPost, "/login", nil))
		if err != nil {
			fmt.Println(err)
			return
		}
		res.Body.Close()
		fmt.Print(res.StatusCode, " ")
	}
	fmt.Println()
	// Output: 401 401 401 401 401 429
}

// A server that answers slow and silent clients: the app's config bounds
// a request's header and body, an answer and an idle connection, and
// Listen serves it in place of app.Listen. (This example is not run: it
// serves until the process ends.)
func ExampleListen() {
	app := fiber.New(fiber.Config{ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute})
	app.Use(fiberv3.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("hello") })
	log.Fatal(fiberv3.Listen(app, ":8080"))
}

// Serve serves on a listener of one's own, here a free loopback port, in
// place of app.Listener; it takes app.Listener's ListenConfig.
func ExampleServe() {
	app := fiber.New(fiber.Config{ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute})
	app.Use(fiberv3.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("hello") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- fiberv3.Serve(app, ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
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
