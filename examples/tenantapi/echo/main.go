// Command echo serves the Tenant API example on Echo (v4).
//
//	go run ./examples/tenantapi/echo                          # budgets in memory
//	go run ./examples/tenantapi/echo -redis 127.0.0.1:6379    # budgets in Redis
//
// See examples/tenantapi/README.md for the routes, their budgets and curl
// lines to try.
package main

import (
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/tenantapi"
)

func main() { tenantapi.Main(build) }

// build registers every route as authenticate → budgets → handler.
func build(api *tenantapi.API) (tenantapi.Server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	for _, rt := range api.Routes() {
		e.Add(rt.Method, rt.ColonPath(), handler(rt),
			oneSegment,                // 404 for what only Echo would match
			authenticate(rt.Access),   // 401 before any budget is charged
			echomw.ForLayer(rt.Layer)) // the route's budgets
	}
	return serve.HTTPServer(e), nil
}

// oneSegment answers 404, as Echo does to a path no route matches, when a
// path parameter holds a "/": Echo v4 lets a route's last parameter take
// the rest of the path (GET /api/reports/x/extra would match
// /api/reports/:name with name "x/extra"), where the contract's routes, and
// the other routers, match exactly one segment.
func oneSegment(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for _, v := range c.ParamValues() {
			if strings.Contains(v, "/") {
				return echo.ErrNotFound
			}
		}
		return next(c)
	}
}

// authenticate answers 401 to a request without a valid credential for
// access, and stores the caller's identity in the request's context, where
// the budgets' key functions read it.
func authenticate(access tenantapi.Access) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id, ok := tenantapi.Authenticate(access, c.Request().Header.Values("Authorization"))
			if !ok {
				return write(c, tenantapi.Unauthorized())
			}
			if access != tenantapi.Public {
				c.SetRequest(c.Request().WithContext(tenantapi.WithIdentity(c.Request().Context(), id)))
			}
			return next(c)
		}
	}
}

func handler(rt tenantapi.Route) echo.HandlerFunc {
	return func(c echo.Context) error {
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, tenantapi.MaxBody))
		if err != nil {
			return write(c, tenantapi.BodyError(err))
		}
		id, _ := tenantapi.IdentityFrom(c.Request().Context())
		return write(c, rt.Handle(&tenantapi.Call{Identity: id, Param: c.Param, Body: body}))
	}
}

func write(c echo.Context, rep tenantapi.Reply) error {
	return c.Blob(rep.Status, "application/json", rep.Body)
}
