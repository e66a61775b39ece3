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
// released when the last layer of the request returns (a layer still
// running behind a timeout middleware keeps it). [DecisionFrom] reads it
// until then.
package echomw

import (
	"github.com/labstack/echo/v4"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/reqstate"
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

// values reads Echo's context values as a core.ValueReader. Echo keys are
// strings; other keys read nothing here (Request.Value then asks the
// request's context).
type values reqstate.State

func (v *values) Value(key any) any {
	if k, ok := key.(string); ok {
		return v.Owner.(echo.Context).Get(k)
	}
	return nil
}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer or after the request's layers finished (Echo's
// HTTP error handler runs after that). Handlers may read it while they serve the request (for
// example to log the remaining quota); they must not modify it or keep it.
func DecisionFrom(c echo.Context) *core.Decision {
	if c == nil || c.Request() == nil {
		return nil
	}
	return reqstate.Decision(c.Request().Context())
}

func serve(l *core.Layer, next echo.HandlerFunc, c echo.Context) error {
	r := c.Request()
	rc, st, created := reqstate.Enter(r.Context())
	if st == nil {
		// The request's layers already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		return next(c)
	}
	defer rc.Leave()
	if created {
		st.Req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RawQuery:   r.URL.RawQuery,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Values:     (*values)(st),
			Context:    rc,
		}
		c.SetRequest(r.WithContext(rc))
	}
	st.Owner = c // a nested server has its own echo.Context
	st.Req.Route = c.Path()

	l.Decide(&st.Req, &st.D)
	if st.D.Allowed && st.D.Delay > 0 {
		_ = l.Wait(c.Request().Context(), &st.D) // on error D is now denied
	}
	res := c.Response()
	hdr := res.Header()
	rc.SetFields(hdr, l, &st.D, created)
	if !st.D.Allowed {
		den := l.Deny(&st.Req, &st.D)
		for k, v := range den.Header {
			hdr[k] = v
		}
		res.WriteHeader(den.Status)
		_, _ = res.Write(den.Body)
		return nil
	}
	return next(c)
}
