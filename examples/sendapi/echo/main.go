// Command echo serves the Send API example on Echo (v4): the routes of
// package sendapi, each behind the example's authentication and the
// quotagate layer of its rate-limit group.
//
//	go run ./examples/sendapi/echo
//	go run ./examples/sendapi/echo -addr 127.0.0.1:9090 -redis 127.0.0.1:6379
package main

import (
	"os"

	"github.com/labstack/echo/v4"

	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/sendapi"
)

func main() { os.Exit(sendapi.Main("sendapi-echo", newServer)) }

func newServer(app *sendapi.App) (sendapi.Server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	limit := func(group string) echo.MiddlewareFunc { return echomw.ForLayer(app.Layer(group)) }
	email, sms := limit(sendapi.GroupEmailSend), limit(sendapi.GroupSMSSend)
	mgmt, auth := limit(sendapi.GroupManagement), limit(sendapi.GroupAuth)
	authn := authenticate(app)

	// Route middleware runs in the order given: authentication first, so
	// that a request without a valid access key is refused (401) before
	// any budget is charged.
	e.POST("/v1/email/messages", func(c echo.Context) error {
		body, ok := readBody(c)
		if !ok {
			return nil
		}
		return write(c, app.SendEmail(c.Request().Context(), credential(c), c.Request().Header.Values(sendapi.HeaderIdempotencyKey), body))
	}, authn, email)
	e.POST("/v1/sms/messages", func(c echo.Context) error {
		body, ok := readBody(c)
		if !ok {
			return nil
		}
		return write(c, app.SendSMS(c.Request().Context(), credential(c), c.Request().Header.Values(sendapi.HeaderIdempotencyKey), body))
	}, authn, sms)
	e.GET("/v1/messages/:id", func(c echo.Context) error {
		return write(c, app.GetMessage(credential(c), c.Param("id")))
	}, authn, mgmt)
	e.GET("/v1/webhooks", func(c echo.Context) error {
		return write(c, app.ListWebhooks(credential(c)))
	}, authn, mgmt)
	e.POST("/v1/webhooks", func(c echo.Context) error {
		body, ok := readBody(c)
		if !ok {
			return nil
		}
		return write(c, app.CreateWebhook(credential(c), body))
	}, authn, mgmt)
	e.DELETE("/v1/webhooks/:id", func(c echo.Context) error {
		return write(c, app.DeleteWebhook(credential(c), c.Param("id")))
	}, authn, mgmt)
	// Unauthenticated: limited per client IP.
	e.POST("/v1/auth/login", func(c echo.Context) error {
		body, ok := readBody(c)
		if !ok {
			return nil
		}
		return write(c, app.Login(body))
	}, auth)
	e.POST("/v1/auth/password-reset", func(c echo.Context) error {
		body, ok := readBody(c)
		if !ok {
			return nil
		}
		return write(c, app.PasswordReset(body))
	}, auth)
	return serve.HTTPServer(e), nil
}

// authenticate resolves the access key and stores its credential in the
// request's context, where the layers' key functions and the handlers find
// it; it answers 401 itself when there is no valid key.
func authenticate(app *sendapi.App) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			cred, denied := app.Authenticate(r.Header.Values("Authorization"))
			if denied != nil {
				return write(c, *denied)
			}
			c.SetRequest(r.WithContext(sendapi.WithCredential(r.Context(), cred)))
			return next(c)
		}
	}
}

func credential(c echo.Context) *sendapi.Credential {
	return sendapi.CredentialFrom(c.Request().Context())
}

func readBody(c echo.Context) ([]byte, bool) {
	body, denied := sendapi.ReadBody(c.Request().Body)
	if denied != nil {
		_ = write(c, *denied)
		return nil, false
	}
	return body, true
}

// write writes a handler's response. The rate-limit fields the layer set
// are already in the response header.
func write(c echo.Context, resp sendapi.Response) error {
	h := c.Response().Header()
	for _, f := range resp.Fields() {
		h.Add(f[0], f[1])
	}
	if resp.Body == nil {
		return c.NoContent(resp.Status)
	}
	return c.Blob(resp.Status, echo.MIMEApplicationJSON, resp.Body)
}
