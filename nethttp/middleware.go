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
	"github.com/quotagate/quotagate/internal/reqstate"
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

// DecisionFrom returns the decision made for the request whose context is
// ctx, or nil outside a quotagate layer or after the request's layers
// finished. Handlers may read it while they serve the request (for example
// to log the remaining quota); they must not modify it or keep it.
func DecisionFrom(ctx context.Context) *core.Decision {
	return reqstate.Decision(ctx)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, st, created := reqstate.Enter(r.Context())
	if st == nil {
		// The request's layers already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		h.next.ServeHTTP(w, r)
		return
	}
	defer c.Leave()
	if created {
		st.Req = core.Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RawQuery:   r.URL.RawQuery,
			RemoteAddr: r.RemoteAddr,
			Header:     r.Header,
			Context:    c,
		}
		r = r.WithContext(c)
	}
	st.Req.Route = routeOf(r.Pattern)

	h.layer.Decide(&st.Req, &st.D)
	if st.D.Allowed && st.D.Delay > 0 {
		_ = h.layer.Wait(r.Context(), &st.D) // on error D is now denied
	}
	hdr := w.Header()
	c.SetFields(hdr, h.layer, &st.D, created)
	if !st.D.Allowed {
		den := h.layer.Deny(&st.Req, &st.D)
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
