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

// state is the per-request state shared by stacked layers. It is the
// request's context, so one allocation carries the context link, the
// request view, the decision and the header value slots.
type state struct {
	context.Context
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

// DecisionFrom returns the decision made for the request whose context is
// ctx, or nil outside a quotagate layer. Handlers may read it (for example
// to log remaining quota); they must not modify it.
func DecisionFrom(ctx context.Context) *core.Decision {
	if st, ok := ctx.Value(stateKey{}).(*state); ok {
		return &st.d
	}
	return nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st, _ := r.Context().Value(stateKey{}).(*state)
	if st == nil {
		st = &state{Context: r.Context()}
		st.req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Context:    st,
		}
		r = r.WithContext(st)
	}
	st.req.Route = routeOf(r.Pattern)

	h.layer.Decide(&st.req, &st.d)
	f := h.layer.Fields(&st.d)
	hdr := w.Header()
	for i := 0; i < f.Len(); i++ {
		name, value := f.Field(i)
		st.slots[i] = value
		hdr[name] = st.slots[i : i+1 : i+1]
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
