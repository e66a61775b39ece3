// Package ginmw puts quotagate in front of Gin handlers.
//
// [LimitBy] is the one-call start: r.Use(ginmw.LimitBy(100, time.Minute,
// keyfunc.PeerIP())). [Skip] passes requests through untouched, [OnDeny]
// answers denials with a gin.HandlerFunc (c.JSON), [Key] keys a budget by
// something only Gin knows, and core.CountWhen counts only some answers.
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
	"fmt"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/internal/reqstate"
)

// LimitBy returns Gin middleware that allows each key quota requests per
// window and denies the rest with 429: the one-call start.
//
//	r.Use(ginmw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
//
// It counts with a sliding window, in a budget named "default" (or as
// BudgetName says), in memory on this instance, or, with Store, in a store
// every instance shares (Redis), and answers with the IETF RateLimit-Policy and
// RateLimit header fields. opts are the layer options Middleware takes
// (Skip, OnDeny, core.CountWhen, core.Cost, ...): when the policy grows,
// build an engine with core.New and pass the same options to Middleware.
// LimitBy panics when quota, window or key is invalid, so call it at
// start-up.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) gin.HandlerFunc {
	return ForLayer(adapter.MustLimitBy(quota, window, key, opts...))
}

// BudgetName names the budget LimitBy creates, as the RateLimit-Policy
// field, problem bodies, logs and metrics show it (default "default"):
//
//	ginmw.LimitBy(100, time.Minute, keyfunc.PeerIP(), ginmw.BudgetName("per_ip"))
//
// Middleware refuses it: an engine's budgets are named in core.Budget.Name.
func BudgetName(name string) core.LayerOption { return adapter.BudgetName(name) }

// Store makes LimitBy count in st, a store every instance shares (a Redis
// store), instead of in this process's memory, so that instances behind
// one load balancer spend one budget:
//
//	st, _, err := redisstore.Open(os.Getenv("REDIS_URL"), redisstore.Config{})
//	r.Use(ginmw.LimitBy(100, time.Minute, keyfunc.PeerIP(), ginmw.Store(st)))
//
// While st fails, LimitBy counts in memory (each instance up to the quota)
// and logs the failure. Middleware refuses it: an engine's store is
// core.Config.Store.
func Store(st core.Store) core.LayerOption { return adapter.Store(st) }

// ShedBy returns middleware that sheds load and limits nothing else: g
// admits or sheds every request before the handler, a shed request is
// answered 503 with Retry-After, and no budget is counted.
//
//	r.Use(ginmw.ShedBy(adaptive.MustNew(adaptive.Config{})))
//
// opts are the layer options Middleware takes. With budgets as well, pass
// core.GuardBy(g) to Middleware instead. ShedBy panics when g is nil, so
// call it at start-up.
func ShedBy(g core.Guard, opts ...core.LayerOption) gin.HandlerFunc {
	return ForLayer(adapter.MustShedBy(g, opts...))
}

// Middleware returns Gin middleware that applies a layer of eng's budgets,
// configured by opts: core.Use, core.Cost, core.CostIn, core.CostFrom,
// core.Skip, core.CountWhen, core.Deny, core.Headers, and this
// package's Skip and OnDeny. The error lists every configuration problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (gin.HandlerFunc, error) {
	return adapter.Middleware(eng, ForLayer, opts...)
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) gin.HandlerFunc {
	return adapter.Must(Middleware(eng, opts...))
}

type skipKey struct{}
type denyKey struct{}

// Skip makes the layer pass the requests fn reports true for straight to
// the next handler: no budget is evaluated or charged and no rate-limit
// header field is written. It runs before anything else:
//
//	ginmw.Skip(func(c *gin.Context) bool { return c.FullPath() == "/healthz" })
func Skip(fn func(c *gin.Context) bool) core.LayerOption { return core.Attach(skipKey{}, fn) }

// OnDeny makes h answer the requests the layer denies, instead of the
// layer's DenyFunc body; the chain is aborted before h runs. When h runs,
// the rate-limit header fields and the denial's own fields (Retry-After,
// Cache-Control, Content-Type) are set, and [DecisionFrom] says why the
// request was denied. h writes status and body, for example with
// c.JSON(http.StatusTooManyRequests, ...).
func OnDeny(h gin.HandlerFunc) core.LayerOption { return core.Attach(denyKey{}, h) }

// Key returns a key function that reads the request's *gin.Context, for
// budgets keyed by something only Gin knows (a value set by an
// authentication middleware). fn returns "" and an error wrapping
// core.ErrNoKey when the request has no key. Prefer package keyfunc for
// client IPs and credentials: c.ClientIP() trusts forwarding headers.
func Key(fn func(c *gin.Context) (string, error)) core.KeyFunc {
	return func(r *core.Request) (string, error) {
		if k, ok := r.Values.(*keys); ok {
			return fn(k.X.c)
		}
		return "", fmt.Errorf("ginmw.Key: not a Gin request: %w", core.ErrNoKey)
	}
}

// ForLayer returns Gin middleware for an existing layer.
func ForLayer(l *core.Layer) gin.HandlerFunc {
	skip, _ := l.Value(skipKey{}).(func(*gin.Context) bool)
	onDeny, _ := l.Value(denyKey{}).(gin.HandlerFunc)
	return func(c *gin.Context) {
		if skip != nil && skip(c) {
			c.Next()
			return
		}
		serve(l, c, onDeny)
	}
}

// keys reads the Gin keys of a request as a core.ValueReader: those of
// the *gin.Context of its latest Gin layer (a nested engine has its own).
type keys reqstate.Slot[ginLayer]

func (k *keys) Value(key any) any {
	v, _ := k.X.c.Get(key)
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

func serve(l *core.Layer, c *gin.Context, onDeny gin.HandlerFunc) {
	r := c.Request
	rc, st, slot, created, r := reqstate.Enter[ginLayer](r)
	if st == nil {
		// The request's layers already finished: a handler kept the
		// request past its end. Serve without limiting rather than
		// touching recycled state.
		c.Next()
		return
	}
	defer rc.Leave(created)
	if created {
		c.Request = r
	}
	st.Request.Values = (*keys)(slot) // also behind a layer of another adapter
	st.Request.Route = c.FullPath()
	x := (*exchange)(slot)
	*x = exchange{Header: reqstate.Header{H: c.Writer.Header(), C: rc, First: created}, X: ginLayer{c, onDeny}}
	_ = l.Serve(st, x)
}

// ginLayer is what a Gin layer's exchange adds: the request's
// *gin.Context and the layer's OnDeny handler, if any.
type ginLayer struct {
	c      *gin.Context
	onDeny gin.HandlerFunc
}

// exchange is one layer's core.Exchange for a Gin request.
type exchange reqstate.Slot[ginLayer]

func (x *exchange) Deny(d *core.Decision, den core.Denial) error {
	x.WriteDenial(den)
	c, onDeny := x.X.c, x.X.onDeny
	if !x.Use() {
		// The first layer returned (a timeout middleware answered): c
		// may serve another request now.
		x.Release()
		return nil
	}
	c.Abort()
	if onDeny == nil {
		c.Status(den.Status)
		_, _ = c.Writer.Write(den.Body)
	}
	x.Release()
	if onDeny != nil {
		onDeny(c)
	}
	return nil
}

func (x *exchange) Next(status bool) (int, error) {
	c, h := x.X.c, x.Header
	if !h.Use() {
		h.Release()
		return 0, nil // see Deny
	}
	h.Release()
	c.Next()
	if !status {
		return 0, nil
	}
	defer h.Release()
	if !h.Use() {
		return 0, nil
	}
	return c.Writer.Status(), nil
}
