// Command gin serves the Send API example on Gin: the routes of package
// sendapi, each behind the example's authentication and the quotagate
// layer of its rate-limit group.
//
//	go run ./examples/sendapi/gin
//	go run ./examples/sendapi/gin -addr 127.0.0.1:9090 -redis 127.0.0.1:6379
package main

import (
	"os"

	"github.com/gin-gonic/gin"

	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/sendapi"
	"github.com/quotagate/quotagate/ginmw"
)

func main() { os.Exit(sendapi.Main("sendapi-gin", newServer)) }

func newServer(app *sendapi.App) (sendapi.Server, error) {
	// Release mode: no debug lines on stdout, whose only line is the
	// "listening on" line.
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	limit := func(group string) gin.HandlerFunc { return ginmw.ForLayer(app.Layer(group)) }
	email, sms := limit(sendapi.GroupEmailSend), limit(sendapi.GroupSMSSend)
	mgmt, auth := limit(sendapi.GroupManagement), limit(sendapi.GroupAuth)

	// Authentication runs before the group's layer, so that a request
	// without a valid access key is refused (401) before any budget is
	// charged.
	v1 := r.Group("/v1", authenticate(app))
	v1.POST("/email/messages", email, func(c *gin.Context) {
		if body, ok := readBody(c); ok {
			write(c, app.SendEmail(c.Request.Context(), credential(c), c.Request.Header.Values(sendapi.HeaderIdempotencyKey), body))
		}
	})
	v1.POST("/sms/messages", sms, func(c *gin.Context) {
		if body, ok := readBody(c); ok {
			write(c, app.SendSMS(c.Request.Context(), credential(c), c.Request.Header.Values(sendapi.HeaderIdempotencyKey), body))
		}
	})
	v1.GET("/messages/:id", mgmt, func(c *gin.Context) {
		write(c, app.GetMessage(credential(c), c.Param("id")))
	})
	v1.GET("/webhooks", mgmt, func(c *gin.Context) {
		write(c, app.ListWebhooks(credential(c)))
	})
	v1.POST("/webhooks", mgmt, func(c *gin.Context) {
		if body, ok := readBody(c); ok {
			write(c, app.CreateWebhook(credential(c), body))
		}
	})
	v1.DELETE("/webhooks/:id", mgmt, func(c *gin.Context) {
		write(c, app.DeleteWebhook(credential(c), c.Param("id")))
	})
	// Unauthenticated: limited per client IP.
	r.POST("/v1/auth/login", auth, func(c *gin.Context) {
		if body, ok := readBody(c); ok {
			write(c, app.Login(body))
		}
	})
	r.POST("/v1/auth/password-reset", auth, func(c *gin.Context) {
		if body, ok := readBody(c); ok {
			write(c, app.PasswordReset(body))
		}
	})
	return serve.HTTPServer(r), nil
}

// authenticate resolves the access key and stores its credential in the
// request's context, where the layers' key functions and the handlers find
// it; it answers 401 itself when there is no valid key.
func authenticate(app *sendapi.App) gin.HandlerFunc {
	return func(c *gin.Context) {
		cred, denied := app.Authenticate(c.Request.Header.Values("Authorization"))
		if denied != nil {
			write(c, *denied)
			c.Abort()
			return
		}
		c.Request = c.Request.WithContext(sendapi.WithCredential(c.Request.Context(), cred))
		c.Next()
	}
}

func credential(c *gin.Context) *sendapi.Credential {
	return sendapi.CredentialFrom(c.Request.Context())
}

func readBody(c *gin.Context) ([]byte, bool) {
	body, denied := sendapi.ReadBody(c.Request.Body)
	if denied != nil {
		write(c, *denied)
		return nil, false
	}
	return body, true
}

// write writes a handler's response. The rate-limit fields the layer set
// are already in the response header.
func write(c *gin.Context, resp sendapi.Response) {
	h := c.Writer.Header()
	for _, f := range resp.Fields() {
		h.Add(f[0], f[1])
	}
	if resp.Body == nil {
		c.Status(resp.Status)
		c.Writer.WriteHeaderNow()
		return
	}
	c.Data(resp.Status, "application/json", resp.Body)
}
