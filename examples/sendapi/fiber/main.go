// Command fiber serves the Send API example on Fiber (v2): the routes of
// package sendapi, each behind the example's authentication and the
// quotagate layer of its rate-limit group.
//
//	go run ./examples/sendapi/fiber
//	go run ./examples/sendapi/fiber -addr 127.0.0.1:9090 -redis 127.0.0.1:6379
package main

import (
	"context"
	"net"
	"os"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/sendapi"
	"github.com/quotagate/quotagate/fibermw"
)

func main() { os.Exit(sendapi.Main("sendapi-fiber", newServer)) }

func newServer(app *sendapi.App) (sendapi.Server, error) {
	f := fiber.New(fiber.Config{
		DisableStartupMessage: true, // stdout carries only "listening on"
		BodyLimit:             sendapi.MaxBodySize,
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
	limit := func(group string) fiber.Handler { return fibermw.ForLayer(app.Layer(group)) }
	email, sms := limit(sendapi.GroupEmailSend), limit(sendapi.GroupSMSSend)
	mgmt, auth := limit(sendapi.GroupManagement), limit(sendapi.GroupAuth)
	authn := authenticate(app)

	// Handlers run in the order given: authentication first, so that a
	// request without a valid access key is refused (401) before any
	// budget is charged. The layer is attached to each route, so the
	// route pattern is what quotagate sees and logs.
	f.Post("/v1/email/messages", authn, email, func(c *fiber.Ctx) error {
		return write(c, app.SendEmail(c.UserContext(), credential(c), values(c, sendapi.HeaderIdempotencyKey), c.Body()))
	})
	f.Post("/v1/sms/messages", authn, sms, func(c *fiber.Ctx) error {
		return write(c, app.SendSMS(c.UserContext(), credential(c), values(c, sendapi.HeaderIdempotencyKey), c.Body()))
	})
	f.Get("/v1/messages/:id", authn, mgmt, func(c *fiber.Ctx) error {
		return write(c, app.GetMessage(credential(c), c.Params("id")))
	})
	f.Get("/v1/webhooks", authn, mgmt, func(c *fiber.Ctx) error {
		return write(c, app.ListWebhooks(credential(c)))
	})
	f.Post("/v1/webhooks", authn, mgmt, func(c *fiber.Ctx) error {
		return write(c, app.CreateWebhook(credential(c), c.Body()))
	})
	f.Delete("/v1/webhooks/:id", authn, mgmt, func(c *fiber.Ctx) error {
		return write(c, app.DeleteWebhook(credential(c), c.Params("id")))
	})
	// Unauthenticated: limited per client IP.
	f.Post("/v1/auth/login", auth, func(c *fiber.Ctx) error {
		return write(c, app.Login(c.Body()))
	})
	f.Post("/v1/auth/password-reset", auth, func(c *fiber.Ctx) error {
		return write(c, app.PasswordReset(c.Body()))
	})
	return &server{app: f}, nil
}

// server adapts a Fiber app to sendapi.Server. fasthttp's Shutdown does
// nothing for a server that has not started serving yet, after which
// Serve would serve forever; so Shutdown also closes the listener, which
// ends a Serve that starts late.
type server struct {
	app     *fiber.App
	mu      sync.Mutex
	ln      net.Listener
	stopped bool
}

func (s *server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ln.Close()
	}
	s.ln = ln
	s.mu.Unlock()
	// fibermw.Serve: error answers under a write deadline of their own,
	// and connections that close after the client has read the answer.
	return fibermw.Serve(s.app, ln)
}

func (s *server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	ln := s.ln
	s.mu.Unlock()
	err := s.app.ShutdownWithContext(ctx)
	if ln != nil {
		_ = ln.Close() // already closed when fasthttp was serving
	}
	return err
}

// authenticate resolves the access key and stores its credential in the
// request's user context, where the layers' key functions and the handlers
// find it; it answers 401 itself when there is no valid key.
func authenticate(app *sendapi.App) fiber.Handler {
	return func(c *fiber.Ctx) error {
		cred, denied := app.Authenticate(values(c, fiber.HeaderAuthorization))
		if denied != nil {
			return write(c, *denied)
		}
		c.SetUserContext(sendapi.WithCredential(c.UserContext(), cred))
		return c.Next()
	}
}

func credential(c *fiber.Ctx) *sendapi.Credential {
	return sendapi.CredentialFrom(c.UserContext())
}

// values returns copies of every field line of the named request header:
// Fiber's own strings alias buffers reused by the next request.
func values(c *fiber.Ctx, name string) []string {
	all := c.Request().Header.PeekAll(name)
	if len(all) == 0 {
		return nil
	}
	out := make([]string, len(all))
	for i, v := range all {
		out[i] = string(v)
	}
	return out
}

// write writes a handler's response. The rate-limit fields the layer set
// are already in the response header.
func write(c *fiber.Ctx, resp sendapi.Response) error {
	for _, f := range resp.Fields() {
		c.Response().Header.Add(f[0], f[1])
	}
	c.Status(resp.Status)
	if resp.Body == nil {
		return nil
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(resp.Body)
}
