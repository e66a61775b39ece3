package echov5_test

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/internal/limitredis"
)

// timeoutStatus is what the suite's TimeoutChain check expects from Echo's
// ContextTimeout, whose error handler answers a handler that returns the
// context's error with 503.
const timeoutStatus = http.StatusServiceUnavailable

func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: timeoutStatus})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: timeoutStatus})
}

// serve builds an Echo v5 server for app: group layers as group
// middleware, route layers as route middleware.
func serve(t *testing.T, app limittest.App) string {
	srv := httptest.NewServer(newEcho(app))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newEcho(app limittest.App) *echo.Echo {
	e := echo.New()
	// Echo's own Recover hands a panic to the HTTPErrorHandler as an error
	// (500); it prints no stack, to keep the test log readable.
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}), values)
	for _, g := range app.Groups {
		grp := e.Group(g.Prefix, layerMiddleware(g.Layers)...)
		for _, rt := range g.Routes {
			mws := layerMiddleware(rt.Layers)
			if rt.Timeout != 0 {
				mws = append([]echo.MiddlewareFunc{middleware.ContextTimeout(rt.Timeout)}, mws...)
			}
			grp.Add(rt.Method, rt.Path, func(c *echo.Context) error {
				if rt.Timeout != 0 {
					// The handler outlasts the timeout, after which Echo
					// may recycle c: it touches c no more.
					ctx := c.Request().Context()
					rt.HandleContext(ctx)
					return ctx.Err()
				}
				var body string
				if rt.HandleContext != nil {
					body = rt.HandleContext(c.Request().Context())
				} else {
					body = rt.Handle()
				}
				if rt.Status >= 400 {
					return echo.NewHTTPError(rt.Status, body)
				}
				return c.Blob(cmp.Or(rt.Status, http.StatusOK), "text/plain; charset=utf-8", []byte(body))
			}, mws...)
		}
	}
	return e
}

func layerMiddleware(layers []*core.Layer) []echo.MiddlewareFunc {
	out := make([]echo.MiddlewareFunc, len(layers))
	for i, l := range layers {
		out[i] = echov5.ForLayer(l)
	}
	return out
}

// values copies the limittest value header into Echo's context values.
func values(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if v := c.Request().Header.Get(limittest.ValueHeader); v != "" {
			c.Set(limittest.ValueKey, v)
		}
		return next(c)
	}
}
