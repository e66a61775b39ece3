// Package echov5 puts quotagate in front of Echo v5 handlers
// (github.com/labstack/echo/v5). It is package echomw for Echo v5: the same
// functions and options, on *echo.Context. Only this package imports Echo
// v5, so an Echo v4 application that imports echomw never builds it.
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
// byte for byte. With [DenyAsError] a denial is returned as an
// *echo.HTTPError instead, for the app's HTTPErrorHandler to render; with
// [DenyHandler] a function of the app's answers it.
//
// Key functions see the request as a [core.Request]:
//
//   - Method, Path and RawQuery (from the request's URL), and Header (the
//     request's http.Header);
//   - Route is c.Path(), the pattern Echo matched ("/users/:id"). Echo v5
//     routes a request before its e.Use middleware runs, so Route is known
//     there as in group and route middleware; it is empty in e.Pre
//     middleware, which runs before routing;
//   - RemoteAddr is the request's RemoteAddr, the transport peer address.
//     The middleware never uses c.RealIP(), which follows the app's
//     IPExtractor; derive a client IP behind proxies with package keyfunc;
//   - Values reads Echo's context values (c.Set / c.Get, string keys), and
//     Request.Value falls back to the request's context.
//
// Stacked layers find the request's state through the request's context:
// the outermost layer replaces the request (c.SetRequest) with one whose
// context carries a small per-request object; the decision itself lives in
// pooled state, released when the last layer of the request returns.
// [DecisionFrom] reads it until then.
package echov5

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/internal/reqstate"
)

// LimitBy returns Echo middleware that allows each key quota requests per
// window and denies the rest with 429: the one-call start.
//
//	e.Use(echov5.LimitBy(100, time.Minute, keyfunc.PeerIP()))
//
// It counts with a sliding window, in a budget named "default" (or as
// BudgetName says), in memory on this instance, or, with Store, in a store
// every instance shares (Redis), and answers with the IETF RateLimit-Policy and
// RateLimit header fields. opts are the layer options Middleware takes
// (Skipper, DenyHandler, DenyAsError, core.CountWhen, core.Cost, ...): when
// the policy grows, build an engine with core.New and pass the same options
// to Middleware. LimitBy panics when quota, window or key is invalid, so
// call it at start-up.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) echo.MiddlewareFunc {
	return ForLayer(adapter.MustLimitBy(quota, window, key, opts...))
}

// BudgetName names the budget LimitBy creates, as the RateLimit-Policy
// field, problem bodies, logs and metrics show it (default "default"):
//
//	echov5.LimitBy(100, time.Minute, keyfunc.PeerIP(), echov5.BudgetName("per_ip"))
//
// Middleware refuses it: an engine's budgets are named in core.Budget.Name.
func BudgetName(name string) core.LayerOption { return adapter.BudgetName(name) }

// Store makes LimitBy count in st, a store every instance shares (a Redis
// store), instead of in this process's memory, so that instances behind
// one load balancer spend one budget:
//
//	st, _, err := redisstore.Open(os.Getenv("REDIS_URL"), redisstore.Config{})
//	e.Use(echov5.LimitBy(100, time.Minute, keyfunc.PeerIP(), echov5.Store(st)))
//
// While st fails, LimitBy counts in memory (each instance up to the quota)
// and logs the failure. Middleware refuses it: an engine's store is
// core.Config.Store.
func Store(st core.Store) core.LayerOption { return adapter.Store(st) }

// ShedBy returns middleware that sheds load and limits nothing else: g
// admits or sheds every request before the handler, a shed request is
// answered 503 with Retry-After, and no budget is counted.
//
//	e.Use(echov5.ShedBy(adaptive.MustNew(adaptive.Config{})))
//
// opts are the layer options Middleware takes. With budgets as well, pass
// core.GuardBy(g) to Middleware instead. ShedBy panics when g is nil, so
// call it at start-up.
func ShedBy(g core.Guard, opts ...core.LayerOption) echo.MiddlewareFunc {
	return ForLayer(adapter.MustShedBy(g, opts...))
}

// Middleware returns Echo middleware that applies a layer of eng's budgets,
// configured by opts: core.Use, core.Cost, core.CostIn, core.CostFrom,
// core.Skip, core.CountWhen, core.Deny, core.Headers, and this
// package's Skipper, DenyHandler and DenyAsError. The error lists every
// configuration problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (echo.MiddlewareFunc, error) {
	return adapter.Middleware(eng, ForLayer, opts...)
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) echo.MiddlewareFunc {
	return adapter.Must(Middleware(eng, opts...))
}

type skipperKey struct{}
type denyKey struct{}

// Skipper makes the layer pass the requests fn reports true for straight
// to the next handler, as the Skipper of Echo's own middleware does (a
// middleware.Skipper can be passed as fn): no budget is evaluated or
// charged and no rate-limit header field is written.
//
//	echov5.Skipper(func(c *echo.Context) bool { return c.Path() == "/healthz" })
func Skipper(fn func(c *echo.Context) bool) core.LayerOption {
	return core.Attach(skipperKey{}, fn)
}

// DenyHandler makes fn answer the requests the layer denies, as the
// DenyHandler of Echo's RateLimiterConfig does; what it returns is what the
// middleware returns, so returning an error hands the denial to the app's
// HTTPErrorHandler. When fn runs, the rate-limit header fields and the
// denial's own fields (Retry-After, Cache-Control, Content-Type) are set;
// d says why the request was denied (d.Reason, d.DeniedBy, d.RetryAfter).
// fn must not keep d.
func DenyHandler(fn func(c *echo.Context, d *core.Decision) error) core.LayerOption {
	return core.Attach(denyKey{}, denyFunc(func(c *echo.Context, d *core.Decision, _ core.Denial) error {
		return fn(c, d)
	}))
}

// denyFunc answers a denial; den is the layer's rendered denial.
type denyFunc func(c *echo.Context, d *core.Decision, den core.Denial) error

// DenyAsError makes the middleware return a denial as an *echo.HTTPError
// (Code: the denial's status, 429 when rate-limited; Message: the status
// text), for the app's HTTPErrorHandler to log and render, instead of
// writing the layer's DenyFunc body. The rate-limit header fields and
// Retry-After are set on the response before it is returned.
func DenyAsError() core.LayerOption {
	return core.Attach(denyKey{}, denyFunc(func(_ *echo.Context, _ *core.Decision, den core.Denial) error {
		return echo.NewHTTPError(den.Status, http.StatusText(den.Status))
	}))
}

// Key returns a key function that reads the request's *echo.Context, in the
// manner of the IdentifierExtractor of Echo's RateLimiterConfig, for
// budgets keyed by something only Echo knows (a value an authentication
// middleware set with c.Set). fn returns an error wrapping core.ErrNoKey
// when the request has no key. Prefer package keyfunc for client IPs and
// credentials.
func Key(fn func(c *echo.Context) (string, error)) core.KeyFunc {
	return func(r *core.Request) (string, error) {
		if v, ok := r.Values.(*values); ok {
			return fn(v.X.c)
		}
		return "", fmt.Errorf("echov5.Key: not an Echo v5 request: %w", core.ErrNoKey)
	}
}

// ForLayer returns Echo middleware for an existing layer.
func ForLayer(l *core.Layer) echo.MiddlewareFunc {
	skip, _ := l.Value(skipperKey{}).(func(*echo.Context) bool)
	onDeny, _ := l.Value(denyKey{}).(denyFunc)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if skip != nil && skip(c) {
				return next(c)
			}
			return serve(l, next, c, onDeny)
		}
	}
}

// values reads Echo's context values as a core.ValueReader. Echo keys are
// strings; other keys read nothing here (Request.Value then asks the
// request's context).
type values reqstate.Slot[echoLayer]

func (v *values) Value(key any) any {
	if k, ok := key.(string); ok {
		return v.X.c.Get(k)
	}
	return nil
}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer or after the request's layers finished (Echo's
// HTTP error handler runs after that). Handlers may read it while they
// serve the request (for example to log the remaining quota); they must not
// modify it or keep it.
func DecisionFrom(c *echo.Context) *core.Decision {
	if c == nil || c.Request() == nil {
		return nil
	}
	return reqstate.Decision(c.Request().Context())
}

func serve(l *core.Layer, next echo.HandlerFunc, c *echo.Context, onDeny denyFunc) error {
	r := c.Request()
	rc, st, slot, created, r := reqstate.Enter[echoLayer](r)
	if st == nil {
		// The request's layers already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		return next(c)
	}
	defer rc.Leave(created)
	if created {
		c.SetRequest(r)
	}
	st.Request.Values = (*values)(slot) // also behind a layer of another adapter
	st.Request.Route = c.Path()
	x := (*exchange)(slot)
	*x = exchange{Header: reqstate.Header{H: c.Response().Header(), C: rc, First: created}, X: echoLayer{c, next, onDeny}}
	return l.Serve(st, x)
}

// echoLayer is what an Echo layer's exchange adds: the request's *echo.Context, the
// next handler and the layer's denial handler, if any.
type echoLayer struct {
	c      *echo.Context
	next   echo.HandlerFunc
	onDeny denyFunc
}

// exchange is one layer's core.Exchange for an Echo request.
type exchange reqstate.Slot[echoLayer]

func (x *exchange) Deny(d *core.Decision, den core.Denial) error {
	x.WriteDenial(den)
	c, onDeny := x.X.c, x.X.onDeny
	if !x.Use() {
		// The first layer returned (a timeout middleware answered): c
		// may serve another request now.
		x.Release()
		return nil
	}
	if onDeny != nil {
		x.Release()
		return onDeny(c, d, den)
	}
	w := c.Response()
	w.WriteHeader(den.Status)
	_, _ = w.Write(den.Body)
	x.Release()
	return nil
}

// Next runs the chain and, when asked, reports the status the response
// got or, when the handler returned an error without writing, the status
// Echo's error handler will give it (echo.ResolveResponseStatus). It reads
// the Slot before calling the chain, whose layers refill it, and reaches c
// only while the first layer has not returned (see Deny).
func (x *exchange) Next(status bool) (int, error) {
	c, next, h := x.X.c, x.X.next, x.Header
	if !h.Use() {
		h.Release()
		return 0, nil
	}
	h.Release()
	err := next(c)
	if !status {
		return 0, err
	}
	defer h.Release()
	if !h.Use() {
		return 0, err
	}
	_, code := echo.ResolveResponseStatus(c.Response(), err)
	return code, err
}
