// Package nethttp puts quotagate in front of net/http handlers.
//
// [LimitBy] is the one-call start: nethttp.LimitBy(100, time.Minute,
// keyfunc.PeerIP()) limits each client IP to 100 requests a minute. [Skip]
// passes requests (health checks) through untouched, [OnDeny] answers
// denials with a handler of yours, and core.CountWhen counts only some
// answers (failed logins).
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
//
// The route a request is for (core.Request.Route: key functions, logs and
// metrics read it) is the pattern the ServeMux a layer wraps matches for
// it ("GET /users/{id}" gives "/users/{id}"), so a layer around a whole
// mux names each route; a layer around a handler takes the pattern the
// request was routed by before it (http.Request.Pattern). Patterns are
// the mux's own, so their number is bounded.
package nethttp

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/internal/reqstate"
)

// LimitBy returns middleware that allows each key quota requests per
// window and denies the rest with 429: the one-call start.
//
//	mw := nethttp.LimitBy(100, time.Minute, keyfunc.PeerIP())
//	srv := &http.Server{Addr: ":8080", Handler: mw(mux), ReadHeaderTimeout: 5 * time.Second,
//		ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute}
//
// It counts with a sliding window, in a budget named "default" (or as
// BudgetName says), in memory on this instance, or, with Store, in a store
// every instance shares (Redis), and answers with the IETF RateLimit-Policy and
// RateLimit header fields. opts are the layer options Middleware takes
// (Skip, OnDeny, core.CountWhen, core.Cost, core.Headers, ...): when
// the policy grows (several budgets, Redis, tiers), build an engine with
// core.New and pass the same options to Middleware. LimitBy panics when
// quota, window or key is invalid, so call it at start-up.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) func(http.Handler) http.Handler {
	return ForLayer(adapter.MustLimitBy(quota, window, key, opts...))
}

// BudgetName names the budget LimitBy creates, as the RateLimit-Policy
// field, problem bodies, logs and metrics show it (default "default"):
//
//	nethttp.LimitBy(100, time.Minute, keyfunc.PeerIP(), nethttp.BudgetName("per_ip"))
//
// Middleware refuses it: an engine's budgets are named in core.Budget.Name.
func BudgetName(name string) core.LayerOption { return adapter.BudgetName(name) }

// Store makes LimitBy count in st, a store every instance shares (a Redis
// store), instead of in this process's memory, so that instances behind
// one load balancer spend one budget:
//
//	st, _, err := redisstore.Open(os.Getenv("REDIS_URL"), redisstore.Config{})
//	mw := nethttp.LimitBy(100, time.Minute, keyfunc.PeerIP(), nethttp.Store(st))
//
// While st fails, LimitBy counts in memory (each instance up to the quota)
// and logs the failure. Middleware refuses it: an engine's store is
// core.Config.Store.
func Store(st core.Store) core.LayerOption { return adapter.Store(st) }

// ShedBy returns middleware that sheds load and limits nothing else: g
// admits or sheds every request before the handler, a shed request is
// answered 503 with Retry-After, and no budget is counted.
//
//	mw := nethttp.ShedBy(adaptive.MustNew(adaptive.Config{}))
//	srv := &http.Server{Addr: ":8080", Handler: mw(mux), ReadHeaderTimeout: 5 * time.Second,
//		ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute}
//
// opts are the layer options Middleware takes. With budgets as well, pass
// core.GuardBy(g) to Middleware instead. ShedBy panics when g is nil, so
// call it at start-up.
func ShedBy(g core.Guard, opts ...core.LayerOption) func(http.Handler) http.Handler {
	return ForLayer(adapter.MustShedBy(g, opts...))
}

// Middleware returns middleware that applies a layer of eng's budgets,
// configured by opts: core.Use, core.Cost, core.CostIn, core.CostFrom,
// core.Skip, core.CountWhen, core.Deny, core.Headers, and this
// package's Skip and OnDeny. The error lists every configuration problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (func(http.Handler) http.Handler, error) {
	return adapter.Middleware(eng, ForLayer, opts...)
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) func(http.Handler) http.Handler {
	return adapter.Must(Middleware(eng, opts...))
}

type skipKey struct{}
type denyKey struct{}

// Skip makes the layer pass the requests fn reports true for straight to
// the next handler: no budget is evaluated or charged and no rate-limit
// header field is written. It runs before anything else, on the
// *http.Request itself (health checks, internal callers):
//
//	nethttp.Skip(func(r *http.Request) bool { return r.URL.Path == "/healthz" })
func Skip(fn func(r *http.Request) bool) core.LayerOption { return core.Attach(skipKey{}, fn) }

// OnDeny makes h answer the requests the layer denies, instead of the
// layer's DenyFunc body. When h runs, the rate-limit header fields and the
// denial's own fields (Retry-After, Cache-Control, Content-Type) are set;
// [DecisionFrom] of the request's context says why it was denied. h writes
// the status and the body; a status outside 400-599 is the handler's
// responsibility.
func OnDeny(h http.Handler) core.LayerOption { return core.Attach(denyKey{}, h) }

// ForLayer returns middleware for an existing layer.
func ForLayer(l *core.Layer) func(http.Handler) http.Handler {
	skip, _ := l.Value(skipKey{}).(func(*http.Request) bool)
	onDeny, _ := l.Value(denyKey{}).(http.Handler)
	return func(next http.Handler) http.Handler {
		mux, _ := next.(*http.ServeMux)
		return &handler{layer: l, next: next, mux: mux, skip: skip, onDeny: onDeny}
	}
}

type handler struct {
	layer  *core.Layer
	next   http.Handler
	mux    *http.ServeMux // next, when it is a ServeMux: it names the route
	skip   func(*http.Request) bool
	onDeny http.Handler
}

// route is the route r is for: the pattern next matches when next is a
// ServeMux (the layer wraps a router), else the pattern the request was
// routed by before it reached the layer.
func (h *handler) route(r *http.Request) string {
	if h.mux != nil {
		if _, pattern := h.mux.Handler(r); pattern != "" {
			return routeOf(pattern)
		}
	}
	return routeOf(r.Pattern)
}

// DecisionFrom returns the decision made for the request whose context is
// ctx, or nil outside a quotagate layer or after the request's layers
// finished. Handlers may read it while they serve the request (for example
// to log the remaining quota); they must not modify it or keep it.
func DecisionFrom(ctx context.Context) *core.Decision {
	return reqstate.Decision(ctx)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.skip != nil && h.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	c, st, slot, created, r := reqstate.Enter[netLayer](r)
	if st == nil {
		// The request's layers already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		h.next.ServeHTTP(w, r)
		return
	}
	defer c.Leave(created)
	st.Request.Route = h.route(r)
	x := (*exchange)(slot)
	*x = exchange{Header: reqstate.Header{H: w.Header(), C: c, First: created}, X: netLayer{h, w, r}}
	_ = h.layer.Serve(st, x)
}

// netLayer is what a net/http layer's exchange adds: the layer's handler,
// and the request's response writer and request.
type netLayer struct {
	h *handler
	w http.ResponseWriter
	r *http.Request
}

// exchange is one layer's core.Exchange for a net/http request.
type exchange reqstate.Slot[netLayer]

func (x *exchange) Deny(d *core.Decision, den core.Denial) error {
	x.WriteDenial(den)
	if h := x.X.h; h.onDeny != nil {
		h.onDeny.ServeHTTP(x.X.w, x.X.r)
		return nil
	}
	x.X.w.WriteHeader(den.Status)
	_, _ = x.X.w.Write(den.Body)
	return nil
}

func (x *exchange) Next(status bool) (int, error) {
	next, w, r := x.X.h.next, x.X.w, x.X.r
	if !status {
		next.ServeHTTP(w, r)
		return 0, nil
	}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if sw.status == 0 {
		return http.StatusOK, nil // nothing written: net/http answers 200
	}
	return sw.status, nil
}

// statusWriter records the status a handler answers with, for
// core.CountWhen. It passes Flush through, and http.ResponseController
// reaches the writer beneath through Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the writer beneath, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
