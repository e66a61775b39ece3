// Command fiber serves the Tenant API example on Fiber (v2).
//
//	go run ./examples/tenantapi/fiber                          # budgets in memory
//	go run ./examples/tenantapi/fiber -redis 127.0.0.1:6379    # budgets in Redis
//
// See examples/tenantapi/README.md for the routes, their budgets and curl
// lines to try.
package main

import (
	"context"
	"net"

	"github.com/gofiber/fiber/v2"

	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/tenantapi"
	"github.com/quotagate/quotagate/fibermw"
)

func main() { tenantapi.Main(build) }

// build registers every route as authenticate → budgets → handler.
func build(api *tenantapi.API) (tenantapi.Server, error) {
	app := fiber.New(fiber.Config{
		DisableStartupMessage: true, // stdout carries only the listening line
		BodyLimit:             tenantapi.MaxBody,
		// Bound how long a slow (or silent) client may hold a connection,
		// and the size of a request's header, as every example does (see
		// package serve). fasthttp has no header timeout: ReadTimeout
		// covers the header and the body. It reads a request's whole
		// header into ReadBufferSize (default 4 KiB) and answers 431 to a
		// larger one.
		ReadTimeout:    serve.ReadTimeout,
		WriteTimeout:   serve.WriteTimeout,
		IdleTimeout:    serve.IdleTimeout,
		ReadBufferSize: serve.MaxHeaderBytes,
	})
	for _, rt := range api.Routes() {
		app.Add(rt.Method, rt.ColonPath(),
			authenticate(rt.Access),    // 401 before any budget is charged
			fibermw.ForLayer(rt.Layer), // the route's budgets
			handler(rt))
	}
	return server{app}, nil
}

// authenticate answers 401 to a request without a valid credential for
// access, and stores the caller's identity in the user context, where the
// budgets' key functions read it.
func authenticate(access tenantapi.Access) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, ok := tenantapi.Authenticate(access, authorization(c))
		if !ok {
			return write(c, tenantapi.Unauthorized())
		}
		if access != tenantapi.Public {
			c.SetUserContext(tenantapi.WithIdentity(c.UserContext(), id))
		}
		return c.Next()
	}
}

// authorization returns every Authorization field line of the request.
func authorization(c *fiber.Ctx) []string {
	all := c.Request().Header.PeekAll(fiber.HeaderAuthorization)
	out := make([]string, len(all))
	for i, v := range all {
		out[i] = string(v)
	}
	return out
}

func handler(rt tenantapi.Route) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, _ := tenantapi.IdentityFrom(c.UserContext())
		// Params and Body alias Fiber's buffers: the handler uses them
		// before it returns and keeps nothing.
		return write(c, rt.Handle(&tenantapi.Call{Identity: id, Param: func(name string) string { return c.Params(name) }, Body: c.Body()}))
	}
}

func write(c *fiber.Ctx, rep tenantapi.Reply) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(rep.Status).Send(rep.Body)
}

// server serves a Fiber app as a tenantapi.Server, with fibermw.Serve:
// error answers under a write deadline of their own, and connections that
// close after the client has read the answer.
type server struct{ app *fiber.App }

func (s server) Serve(ln net.Listener) error        { return fibermw.Serve(s.app, ln) }
func (s server) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
