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
//   - Method, Path (the request URL's path) and Header (the request's
//     http.Header);
//   - Route is c.Path(), the pattern Echo matched ("/users/:id"), known in
//     group middleware too; empty in e.Pre middleware, which runs before
//     routing;
//   - RemoteAddr is the request's RemoteAddr, the transport peer address.
//     The middleware never uses c.RealIP(), which trusts forwarding headers
//     by default; derive a client IP behind proxies with package keyfunc;
//   - Values reads Echo's context values (c.Set / c.Get, string keys), and
//     Request.Value falls back to the request's context.
//
// The per-request state lives in the request's context (the request is
// replaced with c.SetRequest by one whose context carries it), which costs
// one allocation where Echo's value store would cost two.
package echomw

import (
	"context"

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

// state is the per-request state shared by stacked layers. It is the
// request's context, so one allocation carries the context link, the
// request view, the decision and the header value slots.
type state struct {
	context.Context
	ec    echo.Context
	req   core.Request
	d     core.Decision
	slots [3]string
}

func (s *state) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return s
	}
	return s.Context.Value(key)
}

// values reads Echo's context values as a core.ValueReader. Echo keys are
// strings; other keys read nothing here (Request.Value then asks the
// request's context).
type values state

func (v *values) Value(key any) any {
	if k, ok := key.(string); ok {
		return v.ec.Get(k)
	}
	return nil
}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer. Handlers (and middleware around the layer, and
// the HTTP error handler) may read it, for example to log remaining quota;
// they must not modify it.
func DecisionFrom(c echo.Context) *core.Decision {
	if c == nil || c.Request() == nil {
		return nil
	}
	if st, ok := c.Request().Context().Value(stateKey{}).(*state); ok {
		return &st.d
	}
	return nil
}

func serve(l *core.Layer, next echo.HandlerFunc, c echo.Context) error {
	r := c.Request()
	st, _ := r.Context().Value(stateKey{}).(*state)
	if st == nil {
		st = &state{Context: r.Context()}
		st.req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Values:     (*values)(st),
			Context:    st,
		}
		c.SetRequest(r.WithContext(st))
	}
	st.ec = c // a nested server has its own echo.Context
	st.req.Route = c.Path()

	l.Decide(&st.req, &st.d)
	f := l.Fields(&st.d)
	res := c.Response()
	hdr := res.Header()
	for i := 0; i < f.Len(); i++ {
		name, value := f.Field(i)
		st.slots[i] = value
		hdr[name] = st.slots[i : i+1 : i+1]
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
