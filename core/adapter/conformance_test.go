package adapter_test

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/internal/limitredis"
)

// TestConformance runs core/limittest against the toy router's adapter
// (example_router_test.go), as every adapter does, on memory and on Redis.
func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: http.StatusServiceUnavailable})
}

// TestNoUseAfterRecycling runs the TimeoutChain check on a Strict toy
// router: the layers behind Timeout, which outlive the request's outermost
// handler, never use the router's context once it was recycled (a layer
// without the Use/Release bracket does, and fails here).
func TestNoUseAfterRecycling(t *testing.T) {
	strict := func(t *testing.T, app limittest.App) string {
		rt := newRouter(app)
		rt.Strict = true
		t.Cleanup(func() {
			if n := rt.StaleUses.Load(); n != 0 {
				t.Errorf("%d uses of a request's context after the router recycled it", n)
			}
		})
		return start(t, rt)
	}
	limittest.TimeoutChain(t, limittest.Config{Serve: strict, TimeoutStatus: http.StatusServiceUnavailable})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: http.StatusServiceUnavailable})
}

// serve serves a toy router for app.
func serve(t *testing.T, app limittest.App) string { return start(t, newRouter(app)) }

// start serves rt until the test ends, and returns its URL.
func start(t *testing.T, rt *Router) string {
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	return srv.URL
}

// newRouter builds a toy router for app: panic recovery and the suite's
// value middleware first, then for each route its group's layers, Timeout
// when the route has one, the route's layers and its handler.
func newRouter(app limittest.App) *Router {
	rt := new(Router)
	rt.Use(func(next HandlerFunc) HandlerFunc {
		return func(c *Ctx) {
			defer func() {
				if recover() != nil {
					c.Send(http.StatusInternalServerError, nil)
				}
			}()
			next(c)
		}
	}, func(next HandlerFunc) HandlerFunc {
		return func(c *Ctx) {
			if v := c.Request().Header.Get(limittest.ValueHeader); v != "" {
				c.Set(limittest.ValueKey, v)
			}
			next(c)
		}
	})
	for _, g := range app.Groups {
		for _, r := range g.Routes {
			var mw []MiddlewareFunc
			for _, l := range g.Layers {
				mw = append(mw, ForLayer(l))
			}
			if r.Timeout != 0 {
				mw = append(mw, Timeout(r.Timeout))
			}
			for _, l := range r.Layers {
				mw = append(mw, ForLayer(l))
			}
			rt.Handle(r.Method, g.Prefix+r.Path, handler(r), mw...)
		}
	}
	return rt
}

// handler answers as r says.
func handler(r limittest.Route) HandlerFunc {
	return func(c *Ctx) {
		var body string
		if r.HandleContext != nil {
			req := c.Request()
			if req == nil {
				return // behind Timeout, c was recycled before the handler ran
			}
			body = r.HandleContext(req.Context())
			if r.Timeout != 0 {
				return // Timeout answers
			}
		} else {
			body = r.Handle()
		}
		c.SetHeader("Content-Type", "text/plain; charset=utf-8")
		c.Send(cmp.Or(r.Status, http.StatusOK), []byte(body))
	}
}
