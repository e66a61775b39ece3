// Package nethttp puts quotagate in front of net/http handlers.
//
// [Middleware] returns standard func(http.Handler) http.Handler middleware
// for one layer of budgets. Layers stack: put one on a route group and
// another on a route inside it, and the two behave as one all-or-nothing
// decision (a denial in the inner layer refunds what the outer one charged).
//
// Every response through a layer carries the rate-limit header fields of
// every budget evaluated for it (IETF RateLimit-Policy and RateLimit by
// default); a denied request gets the layer's denial (429 with Retry-After
// and an RFC 9457 body by default) and never reaches the handler.
package nethttp

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/quotagate/quotagate/core"
)

// Middleware returns middleware that applies a layer of eng's budgets,
// configured by opts (core.Use, core.Cost, core.CostOf, core.CostFrom,
// core.WithDeny, core.WithHeaders). The error lists every configuration
// problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (func(http.Handler) http.Handler, error) {
	l, err := eng.Layer(opts...)
	if err != nil {
		return nil, err
	}
	return ForLayer(l), nil
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) func(http.Handler) http.Handler {
	mw, err := Middleware(eng, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// ForLayer returns middleware for an existing layer.
func ForLayer(l *core.Layer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return &handler{layer: l, next: next}
	}
}

type handler struct {
	layer *core.Layer
	next  http.Handler
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
// pooled: it returns to the pool when the outermost layer's handler returns.
type requestState struct {
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

// DecisionFrom returns the decision made for the request whose context is
// ctx, or nil outside a quotagate layer or after the request finished.
// Handlers may read it while they serve the request (for example to log the
// remaining quota); they must not modify it or keep it.
func DecisionFrom(ctx context.Context) *core.Decision {
	if c, ok := ctx.Value(stateKey{}).(*requestContext); ok {
		if st := c.state.Load(); st != nil {
			return &st.d
		}
	}
	return nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(stateKey{}).(*requestContext)
	var st *requestState
	if c == nil {
		st = statePool.Get().(*requestState)
		c = &requestContext{Context: r.Context()}
		c.state.Store(st)
		st.req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RawQuery:   r.URL.RawQuery,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Context:    c,
		}
		r = r.WithContext(c)
		defer release(c, st)
	} else if st = c.state.Load(); st == nil {
		// The outermost layer already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		h.next.ServeHTTP(w, r)
		return
	}
	st.req.Route = routeOf(r.Pattern)

	h.layer.Decide(&st.req, &st.d)
	f := h.layer.Fields(&st.d)
	hdr := w.Header()
	for i := 0; i < f.Len(); i++ {
		name, value := f.Field(i)
		c.slots[i] = value
		hdr[name] = c.slots[i : i+1 : i+1]
	}
	if st.d.Allowed && st.d.Delay > 0 {
		_ = h.layer.Wait(r.Context(), &st.d) // on error d is now denied
	}
	if !st.d.Allowed {
		den := h.layer.Deny(&st.req, &st.d)
		for k, v := range den.Header {
			hdr[k] = v
		}
		w.WriteHeader(den.Status)
		_, _ = w.Write(den.Body)
		return
	}
	h.next.ServeHTTP(w, r)
}

// release returns st to the pool once the outermost layer is done.
func release(c *requestContext, st *requestState) {
	c.state.Store(nil)
	st.d.Reset()
	st.req = core.Request{}
	statePool.Put(st)
}

// routeOf strips the method and host from a ServeMux pattern
// ("POST example.com/items/{id}" → "/items/{id}").
func routeOf(pattern string) string {
	if pattern == "" || pattern[0] == '/' {
		return pattern
	}
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		return pattern[i:]
	}
	return pattern
}
