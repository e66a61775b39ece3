// Package echomw puts quotagate in front of Echo (v4) handlers.
//
// [Middleware] returns an echo.MiddlewareFunc for one layer of budgets. Add
// it to the server (e.Use), to a route group (g.Use, or e.Group(prefix, mw))
// or to a single route (e.POST("/items", handler, mw)). Layers stack: a
// group's layer and a route's layer inside it behave as one all-or-nothing
// decision (a denial in the inner layer refunds what the outer one charged).
//
// Every response through a layer carries the rate-limit header fields of
// every budget evaluated for it (IETF RateLimit-Policy and RateLimit by
// default); a denied request gets the layer's denial (429 with Retry-After
// and an RFC 9457 body by default), the middleware returns nil without
// calling the next handler. The behaviour is the same as package nethttp's,
// byte for byte.
//
// Key functions see the request as a [core.Request]:
//
//   - Method, Path and RawQuery (from the request's URL), and Header (the
//     request's http.Header);
//   - Route is c.Path(), the pattern Echo matched ("/users/:id"), known in
//     group middleware too; empty in e.Pre middleware, which runs before
//     routing;
//   - RemoteAddr is the request's RemoteAddr, the transport peer address.
//     The middleware never uses c.RealIP(), which trusts forwarding headers
//     by default; derive a client IP behind proxies with package keyfunc;
//   - Values reads Echo's context values (c.Set / c.Get, string keys), and
//     Request.Value falls back to the request's context.
//
// Stacked layers find the request's state through the request's context:
// the outermost layer replaces the request (c.SetRequest) with one whose
// context carries a small per-request object (one allocation, where Echo's
// value store would cost two); the decision itself lives in pooled state,
// released when the outermost layer's next handler returns. [DecisionFrom]
// reads it until then.
package echomw

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
)

// Middleware returns Echo middleware that applies a layer of eng's budgets,
// configured by opts (core.Use, core.Cost, core.CostOf, core.CostFrom,
// core.WithDeny, core.WithHeaders). The error lists every configuration
// problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (echo.MiddlewareFunc, error) {
	l, err := eng.Layer(opts...)
	if err != nil {
		return nil, err
	}
	return ForLayer(l), nil
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) echo.MiddlewareFunc {
	mw, err := Middleware(eng, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// ForLayer returns Echo middleware for an existing layer.
func ForLayer(l *core.Layer) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return serve(l, next, c) }
	}
}

type stateKey struct{}

// requestContext is the context of a request inside quotagate layers: one
// small allocation carrying the parent context, the header value slots
// (which the response header map references, so they must outlive the
// request) and the pooled per-request state.
type requestContext struct {
	context.Context
	state atomic.Pointer[requestState] // nil once the request is finished
	slots [3]string
}

// requestState is the per-request state shared by stacked layers. It is
// pooled: it returns to the pool when the outermost layer's next handler
// returns.
type requestState struct {
	ec  echo.Context
	req core.Request
	d   core.Decision
}

var statePool = sync.Pool{New: func() any { return new(requestState) }}

func (c *requestContext) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// values reads Echo's context values as a core.ValueReader. Echo keys are
// strings; other keys read nothing here (Request.Value then asks the
// request's context).
type values requestState

func (v *values) Value(key any) any {
	if k, ok := key.(string); ok {
		return v.ec.Get(k)
	}
	return nil
}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer or after the request finished (the outermost
// layer's next handler returned; Echo's HTTP error handler runs after
// that). Handlers may read it while they serve the request (for example to
// log the remaining quota); they must not modify it or keep it.
func DecisionFrom(c echo.Context) *core.Decision {
	if c == nil || c.Request() == nil {
		return nil
	}
	if rc, ok := c.Request().Context().Value(stateKey{}).(*requestContext); ok {
		if st := rc.state.Load(); st != nil {
			return &st.d
		}
	}
	return nil
}

func serve(l *core.Layer, next echo.HandlerFunc, c echo.Context) error {
	r := c.Request()
	rc, _ := r.Context().Value(stateKey{}).(*requestContext)
	var st *requestState
	if rc == nil {
		st = statePool.Get().(*requestState)
		rc = &requestContext{Context: r.Context()}
		rc.state.Store(st)
		st.req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RawQuery:   r.URL.RawQuery,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Values:     (*values)(st),
			Context:    rc,
		}
		c.SetRequest(r.WithContext(rc))
		defer release(rc, st)
	} else if st = rc.state.Load(); st == nil {
		// The outermost layer already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		return next(c)
	}
	st.ec = c // a nested server has its own echo.Context
	st.req.Route = c.Path()

	l.Decide(&st.req, &st.d)
	f := l.Fields(&st.d)
	res := c.Response()
	hdr := res.Header()
	for i := 0; i < f.Len(); i++ {
		name, value := f.Field(i)
		rc.slots[i] = value
		hdr[name] = rc.slots[i : i+1 : i+1]
	}
	if st.d.Allowed && st.d.Delay > 0 {
		_ = l.Wait(c.Request().Context(), &st.d) // on error d is now denied
	}
	if !st.d.Allowed {
		den := l.Deny(&st.req, &st.d)
		for k, v := range den.Header {
			hdr[k] = v
		}
		res.WriteHeader(den.Status)
		_, _ = res.Write(den.Body)
		return nil
	}
	return next(c)
}

// release returns st to the pool once the outermost layer is done.
func release(rc *requestContext, st *requestState) {
	rc.state.Store(nil)
	st.d.Reset()
	st.req = core.Request{}
	st.ec = nil
	statePool.Put(st)
}
