// Command gin serves the Tenant API example on Gin.
//
//	go run ./examples/tenantapi/gin                          # budgets in memory
//	go run ./examples/tenantapi/gin -redis 127.0.0.1:6379    # budgets in Redis
//
// See examples/tenantapi/README.md for the routes, their budgets and curl
// lines to try.
package main

import (
	"io"
	"net/http"
	"os"

	"github.com/gin-gonic/gin"

	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/tenantapi"
	"github.com/quotagate/quotagate/ginmw"
)

func main() {
	// Release mode, and Gin's own output on stderr: stdout carries only the
	// listening line.
	gin.SetMode(gin.ReleaseMode)
	gin.DefaultWriter = os.Stderr
	tenantapi.Main(build)
}

// build registers every route as authenticate → budgets → handler.
func build(api *tenantapi.API) (tenantapi.Server, error) {
	r := gin.New()
	r.Use(gin.Recovery())
	for _, rt := range api.Routes() {
		r.Handle(rt.Method, rt.ColonPath(),
			authenticate(rt.Access),  // 401 before any budget is charged
			ginmw.ForLayer(rt.Layer), // the route's budgets
			handler(rt))
	}
	return serve.HTTPServer(r), nil
}

// authenticate answers 401 to a request without a valid credential for
// access, and stores the caller's identity in the request's context, where
// the budgets' key functions read it.
func authenticate(access tenantapi.Access) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := tenantapi.Authenticate(access, c.Request.Header.Values("Authorization"))
		if !ok {
			write(c, tenantapi.Unauthorized())
			c.Abort()
			return
		}
		if access != tenantapi.Public {
			c.Request = c.Request.WithContext(tenantapi.WithIdentity(c.Request.Context(), id))
		}
		c.Next()
	}
}

func handler(rt tenantapi.Route) gin.HandlerFunc {
	return func(c *gin.Context) {
		body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, tenantapi.MaxBody))
		if err != nil {
			write(c, tenantapi.BodyError(err))
			return
		}
		id, _ := tenantapi.IdentityFrom(c.Request.Context())
		write(c, rt.Handle(&tenantapi.Call{Identity: id, Param: c.Param, Body: body}))
	}
}

func write(c *gin.Context, rep tenantapi.Reply) {
	c.Data(rep.Status, "application/json", rep.Body)
}
