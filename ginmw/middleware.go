// Package ginmw puts quotagate in front of Gin handlers.
//
// [Middleware] returns a gin.HandlerFunc for one layer of budgets. Add it to
// the engine (r.Use), to a route group (g.Use) or to a single route
// (r.POST("/items", mw, handler)). Layers stack: a group's layer and a
// route's layer inside it behave as one all-or-nothing decision (a denial in
// the inner layer refunds what the outer one charged).
//
// Every response through a layer carries the rate-limit header fields of
// every budget evaluated for it (IETF RateLimit-Policy and RateLimit by
// default); a denied request gets the layer's denial (429 with Retry-After
// and an RFC 9457 body by default), the chain is aborted and the handler
// never runs. The behaviour is the same as package nethttp's, byte for byte.
//
// Key functions see the request as a [core.Request]:
//
//   - Method, Path and RawQuery (from c.Request.URL), and Header
//     (c.Request.Header);
//   - Route is c.FullPath(), the pattern Gin matched ("/users/:id"), known
//     in group middleware too; empty for unmatched requests (404);
//   - RemoteAddr is c.Request.RemoteAddr, the transport peer address. The
//     middleware never uses c.ClientIP(), which trusts forwarding headers;
//     derive a client IP behind proxies with package keyfunc;
//   - Values reads Gin keys (c.Set / c.Get), and Request.Value falls back to
//     the request's context.
//
// Stacked layers find the request's state through the request's context:
// the outermost layer replaces c.Request with one whose context carries a
// small per-request object (one allocation, where Gin keys would cost two);
// the decision itself lives in pooled state, released when the last layer
// of the request returns (a layer still running behind a timeout
// middleware keeps it). [DecisionFrom] reads it until then.
package ginmw

import (
	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/reqstate"
)

// Middleware returns Gin middleware that applies a layer of eng's budgets,
// configured by opts (core.Use, core.Cost, core.CostOf, core.CostFrom,
// core.WithDeny, core.WithHeaders). The error lists every configuration
// problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (gin.HandlerFunc, error) {
	l, err := eng.Layer(opts...)
	if err != nil {
		return nil, err
	}
	return ForLayer(l), nil
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) gin.HandlerFunc {
	mw, err := Middleware(eng, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// ForLayer returns Gin middleware for an existing layer.
func ForLayer(l *core.Layer) gin.HandlerFunc {
	return func(c *gin.Context) { serve(l, c) }
}

// keys reads the Gin keys of a request as a core.ValueReader.
type keys reqstate.State

func (k *keys) Value(key any) any {
	v, _ := k.Owner.(*gin.Context).Get(key)
	return v
}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer or after the request's layers finished.
// Handlers may read it while they serve the request (for example to log
// the remaining quota); they must not modify it or keep it.
func DecisionFrom(c *gin.Context) *core.Decision {
	if c == nil || c.Request == nil {
		return nil
	}
	return reqstate.Decision(c.Request.Context())
}

func serve(l *core.Layer, c *gin.Context) {
	r := c.Request
	rc, st, created := reqstate.Enter(r.Context())
	if st == nil {
		// The request's layers already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		c.Next()
		return
	}
	defer rc.Leave()
	if created {
		st.Req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RawQuery:   r.URL.RawQuery,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Values:     (*keys)(st),
			Context:    rc,
		}
		c.Request = r.WithContext(rc)
	}
	st.Owner = c // a nested engine has its own gin.Context
	st.Req.Route = c.FullPath()

	l.Decide(&st.Req, &st.D)
	if st.D.Allowed && st.D.Delay > 0 {
		_ = l.Wait(c.Request.Context(), &st.D) // on error D is now denied
	}
	hdr := c.Writer.Header()
	rc.SetFields(hdr, l, &st.D, created)
	if !st.D.Allowed {
		den := l.Deny(&st.Req, &st.D)
		for k, v := range den.Header {
			hdr[k] = v
		}
		c.AbortWithStatus(den.Status)
		_, _ = c.Writer.Write(den.Body)
		return
	}
	c.Next()
}
