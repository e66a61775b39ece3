package echomw_test

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/internal/limitredis"
)

func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: timeoutStatus})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: timeoutStatus})
}

// serve builds an Echo server for app: group layers as group middleware,
// route layers as route middleware.
func serve(t *testing.T, app limittest.App) string {
	srv := httptest.NewServer(newEcho(app))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newEcho(app limittest.App) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(recoverer, values)
	for _, g := range app.Groups {
		grp := e.Group(g.Prefix, layerMiddleware(g.Layers)...)
		for _, rt := range g.Routes {
			mws := layerMiddleware(rt.Layers)
			if rt.Timeout != 0 {
				mws = append([]echo.MiddlewareFunc{middleware.TimeoutWithConfig(middleware.TimeoutConfig{Timeout: rt.Timeout})}, mws...)
			}
			grp.Add(rt.Method, rt.Path, func(c echo.Context) error {
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
		out[i] = echomw.ForLayer(l)
	}
	return out
}

// recoverer answers a panicking handler with 500 (Echo's own Recover lives
// in a package this module does not require).
func recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = echo.NewHTTPError(http.StatusInternalServerError)
			}
		}()
		return next(c)
	}
}

// values copies the limittest value header into Echo's context values.
func values(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if v := c.Request().Header.Get(limittest.ValueHeader); v != "" {
			c.Set(limittest.ValueKey, v)
		}
		return next(c)
	}
}
