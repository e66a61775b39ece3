package fibermw_test

import (
	"cmp"
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/middleware/timeout"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/fibermw"
	"github.com/quotagate/quotagate/internal/limitredis"
)

func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: timeoutStatus})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: timeoutStatus})
}

// serve builds a Fiber app for app: group layers as group handlers (Use on
// the group's prefix), route layers as route handlers before the route's
// own, and for a route with a Timeout, Fiber's timeout.New around the
// first of them.
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
	go func() { done <- a.Listener(ln) }()
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
	a := fiber.New(fiber.Config{DisableStartupMessage: true})
	a.Use(recover.New())
	a.Use(func(c *fiber.Ctx) error {
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
			h := append(handlers(rt.Layers), func(c *fiber.Ctx) error {
				if rt.Timeout != 0 {
					// The handler outlasts the timeout, after which
					// timeout.New has Fiber recycle c: it touches c no more.
					rt.HandleContext(c.UserContext())
					return nil
				}
				c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
				var body string
				if rt.HandleContext != nil {
					body = rt.HandleContext(c.UserContext())
				} else {
					body = rt.Handle()
				}
				if rt.Status >= 400 {
					return fiber.NewError(rt.Status, body)
				}
				return c.Status(cmp.Or(rt.Status, fiber.StatusOK)).SendString(body)
			})
			if rt.Timeout != 0 {
				h[0] = timeout.New(h[0], rt.Timeout) //nolint:staticcheck // the middleware under test, deprecated for its races
			}
			r.Add(rt.Method, rt.Path, h...)
		}
	}
	return a
}

func handlers(layers []*core.Layer) []fiber.Handler {
	out := make([]fiber.Handler, len(layers))
	for i, l := range layers {
		out[i] = fibermw.ForLayer(l)
	}
	return out
}
