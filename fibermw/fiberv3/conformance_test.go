package fiberv3_test

import (
	"cmp"
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/gofiber/fiber/v3/middleware/timeout"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/internal/limitredis"
)

func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: fiber.StatusRequestTimeout})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: fiber.StatusRequestTimeout})
}

// serve builds a Fiber v3 app for app: group layers as group handlers
// (Group on the group's prefix), route layers as route handlers before the
// route's own, and for a route with a Timeout, Fiber's timeout middleware
// around the first of them.
func serve(t *testing.T, app limittest.App) string {
	return listen(t, newApp(app))
}

// listen serves a on a free 127.0.0.1 port until the test ends.
func listen(t *testing.T, a *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	t.Cleanup(func() {
		if err := a.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func newApp(app limittest.App) *fiber.App {
	a := fiber.New()
	a.Use(recover.New())
	a.Use(func(c fiber.Ctx) error {
		// c.Get borrows the request's buffer; the adapter copies what key
		// functions read back, so the local is stored as is.
		if v := c.Get(limittest.ValueHeader); v != "" {
			c.Locals(limittest.ValueKey, v)
		}
		return c.Next()
	})
	for _, g := range app.Groups {
		var r fiber.Router = a
		if g.Prefix != "" {
			r = a.Group(g.Prefix, handlers(g.Layers)...)
		}
		for _, rt := range g.Routes {
			h := append(handlers(rt.Layers), func(c fiber.Ctx) error {
				if rt.Timeout != 0 {
					// The handler outlasts the timeout, and the middleware
					// copies the response when the time is up: it writes
					// nothing.
					rt.HandleContext(c.Context())
					return c.Context().Err() // Fiber drops it: the time is up
				}
				c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
				var body string
				if rt.HandleContext != nil {
					body = rt.HandleContext(c.Context())
				} else {
					body = rt.Handle()
				}
				if rt.Status >= 400 {
					return fiber.NewError(rt.Status, body)
				}
				return c.Status(cmp.Or(rt.Status, fiber.StatusOK)).SendString(body)
			})
			if rt.Timeout != 0 {
				h[0] = timeout.New(asHandler(h[0]), timeout.Config{Timeout: rt.Timeout})
			}
			r.Add([]string{rt.Method}, rt.Path, h[0], h[1:]...)
		}
	}
	return a
}

func handlers(layers []*core.Layer) []any {
	out := make([]any, len(layers))
	for i, l := range layers {
		out[i] = fiberv3.ForLayer(l)
	}
	return out
}

// asHandler returns h, a layer's fiber.Handler or a route's handler
// function, as a fiber.Handler.
func asHandler(h any) fiber.Handler {
	if f, ok := h.(fiber.Handler); ok {
		return f
	}
	return h.(func(fiber.Ctx) error)
}
