package ginmw_test

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-contrib/timeout"
	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/internal/limitredis"
)

func init() { gin.SetMode(gin.TestMode) }

func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: timeoutStatus})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: timeoutStatus})
}

// serve builds a Gin engine for app: group layers as group middleware,
// route layers as route handlers before the route's own.
func serve(t *testing.T, app limittest.App) string {
	srv := httptest.NewServer(newEngine(app))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newEngine(app limittest.App) *gin.Engine {
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
		c.AbortWithStatus(http.StatusInternalServerError)
	}))
	r.Use(func(c *gin.Context) {
		if v := c.GetHeader(limittest.ValueHeader); v != "" {
			c.Set(limittest.ValueKey, v)
		}
		c.Next()
	})
	for _, g := range app.Groups {
		grp := r.Group(g.Prefix, handlers(g.Layers)...)
		for _, rt := range g.Routes {
			h := append(handlers(rt.Layers), func(c *gin.Context) {
				if rt.Timeout != 0 {
					// The handler outlasts the timeout, which ends its
					// context. gin-contrib/timeout waits for the chain
					// and answers 408 unless the chain's return reaches
					// it first (its timer and the context's deadline
					// race): a handler then answers the timeout itself,
					// as its users' handlers must, with c.Status, which
					// the middleware's writer buffers (AbortWithStatus
					// flushes the header through it even after the
					// timeout: 200 with the middleware's body).
					ctx := c.Request.Context()
					rt.HandleContext(ctx)
					if ctx.Err() != nil {
						c.Status(http.StatusRequestTimeout)
					}
					return
				}
				var body string
				if rt.HandleContext != nil {
					body = rt.HandleContext(c.Request.Context())
				} else {
					body = rt.Handle()
				}
				c.Data(cmp.Or(rt.Status, http.StatusOK), "text/plain; charset=utf-8", []byte(body))
			})
			if rt.Timeout != 0 {
				h = append([]gin.HandlerFunc{timeout.New(timeout.WithTimeout(rt.Timeout))}, h...)
			}
			grp.Handle(rt.Method, rt.Path, h...)
		}
	}
	return r
}

func handlers(layers []*core.Layer) []gin.HandlerFunc {
	out := make([]gin.HandlerFunc, len(layers))
	for i, l := range layers {
		out[i] = ginmw.ForLayer(l)
	}
	return out
}
