// Package fibermw puts quotagate in front of Fiber (v2) handlers; package
// fibermw/fiberv3 does the same for Fiber v3.
//
// [LimitBy] is the one-call start: app.Use(fibermw.LimitBy(100,
// time.Minute, keyfunc.PeerIP())). In the manner of Fiber's own
// limiter.Config, [Next] passes requests through untouched,
// [LimitReached] answers denials, [KeyGenerator] keys a budget by
// something only Fiber knows, and [SkipFailedRequests] and
// [SkipSuccessfulRequests] count only some answers.
//
// [Middleware] returns a fiber.Handler for one layer of budgets. Add it to
// the app (app.Use), to a route group (app.Group(prefix, mw) or g.Use) or to
// a single route (app.Post("/items", mw, handler)). Layers stack: a group's
// layer and a route's layer inside it behave as one all-or-nothing decision
// (a denial in the inner layer refunds what the outer one charged).
//
// Every response through a layer carries the rate-limit header fields of
// every budget evaluated for it (IETF RateLimit-Policy and RateLimit by
// default); a denied request gets the layer's denial (429 with Retry-After
// and an RFC 9457 body by default) and the next handler is not called. The
// behaviour is the same as package nethttp's, byte for byte.
//
// # Serving
//
// Serve the app with [Listen] (or [Serve], on a listener of your own) in
// place of app.Listen: with the app's timeouts, or defaults when its
// config sets none, a client that sends its request slowly or not at all
// gets a 408 or a closed connection within ReadTimeout, on a kept-alive
// connection too, and an idle connection closes within IdleTimeout.
//
// Key functions see the request as a [core.Request]:
//
//   - Method; Path, the request URI's decoded path (as net/http's
//     URL.Path); RawQuery, the query string; and Header, the request
//     headers;
//   - Route is c.Route().Path, the path the running handler was registered
//     with. Fiber matches routes one handler at a time, so in group or
//     app-wide middleware (Use) it is the group's prefix ("/api", or "/");
//     attach a layer to the route (app.Get("/users/:id", mw, handler)) for
//     the route pattern. A route-level layer updates Route for the whole
//     decision;
//   - RemoteAddr is the transport peer address (the connection's remote
//     address, as net/http formats it). The middleware never uses c.IP() or
//     c.IPs(), which trust forwarding headers when Fiber is configured to;
//     derive a client IP behind proxies with package keyfunc;
//   - Values reads Fiber locals (c.Locals), and Request.Value falls back to
//     the user context (c.UserContext()).
//
// # Borrowed strings
//
// Fiber and fasthttp hand out strings that alias request buffers reused by
// the next request on the connection; a store that keeps such a string as a
// key (the memory store does) would see it change. This adapter therefore
// gives key functions only strings they may keep: Method is a constant,
// Route belongs to the app, RemoteAddr, Path and RawQuery are copied, every
// header value read through Header is copied, and a string read from
// locals through Values is copied. A key function that reads the
// *fiber.Ctx itself, or a non-string local that aliases a request buffer,
// must copy (utils.CopyString) what it returns.
//
// The decision lives in pooled state, kept in the request's locals and
// shared by the request's layers; it returns to the pool when the last of
// them returns, and [DecisionFrom] reads it until then.
//
// A concurrency budget's slot (core.Concurrency) is given back when the
// layer's c.Next returns. A body stream writer (c.Context().
// SetBodyStreamWriter) runs after that, when fasthttp writes the response,
// so the slot is free while it streams; do the work in the handler to hold
// the slot for it.
//
// # Timeout middleware
//
// Fiber's timeout.New runs the handler it wraps on a goroutine of its own
// and answers 408 when the time is up, while that handler goes on. Layers
// inside it keep their state until they return, and give their
// concurrency slots and guard places back then, as always. But once the
// first layer of the request has returned, the request is Fiber's again
// (Fiber v2 recycles its Ctx for another request), so the layers still
// running write nothing more to the response, run no more of the chain
// (a request whose shaping wait ends then goes no further), report status
// 0 to core.CountWhen, and a layer that arrives then does nothing.
// timeout.New's own documentation warns of its data races: a handler
// inside it must not touch c once the time is up, and neither can a
// layer inside it that is the request's first (its CountWhen may read
// another request's status). A layer whose wait ends in the instant
// before the first layer returns does call c.Next, and Fiber may release
// c while its Next reads it (timeout.New recovers that panic and logs
// it). timeout.NewWithContext runs the chain on the request's goroutine
// and has none of this.
package fibermw

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/internal/fastreq"
)

// LimitBy returns Fiber middleware that allows each key quota requests per
// window and denies the rest with 429: the one-call start.
//
//	app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
//
// It counts with a sliding window, in a budget named "default" (or as
// BudgetName says), in memory on this instance, or, with Store, in a store
// every instance shares (Redis), and answers with the IETF RateLimit-Policy and
// RateLimit header fields. opts are the layer options Middleware takes
// (Next, LimitReached, SkipFailedRequests, core.Cost, ...): when the policy
// grows, build an engine with core.New and pass the same options to
// Middleware. LimitBy panics when quota, window or key is invalid, so call
// it at start-up.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) fiber.Handler {
	return ForLayer(adapter.MustLimitBy(quota, window, key, opts...))
}

// BudgetName names the budget LimitBy creates, as the RateLimit-Policy
// field, problem bodies, logs and metrics show it (default "default"):
//
//	fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP(), fibermw.BudgetName("per_ip"))
//
// Middleware refuses it: an engine's budgets are named in core.Budget.Name.
func BudgetName(name string) core.LayerOption { return adapter.BudgetName(name) }

// Store makes LimitBy count in st, a store every instance shares (a Redis
// store), instead of in this process's memory, so that instances behind
// one load balancer spend one budget:
//
//	st, _, err := redisstore.Open(os.Getenv("REDIS_URL"), redisstore.Config{})
//	app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP(), fibermw.Store(st)))
//
// While st fails, LimitBy counts in memory (each instance up to the quota)
// and logs the failure. Middleware refuses it: an engine's store is
// core.Config.Store.
func Store(st core.Store) core.LayerOption { return adapter.Store(st) }

// ShedBy returns middleware that sheds load and limits nothing else: g
// admits or sheds every request before the handler, a shed request is
// answered 503 with Retry-After, and no budget is counted.
//
//	app.Use(fibermw.ShedBy(adaptive.MustNew(adaptive.Config{})))
//
// opts are the layer options Middleware takes. With budgets as well, pass
// core.GuardBy(g) to Middleware instead. ShedBy panics when g is nil, so
// call it at start-up.
func ShedBy(g core.Guard, opts ...core.LayerOption) fiber.Handler {
	return ForLayer(adapter.MustShedBy(g, opts...))
}

// Middleware returns Fiber middleware that applies a layer of eng's budgets,
// configured by opts: core.Use, core.Cost, core.CostIn, core.CostFrom,
// core.Skip, core.CountWhen, core.Deny, core.Headers, and this
// package's Next, LimitReached, SkipFailedRequests and
// SkipSuccessfulRequests. The error lists every configuration problem.
func Middleware(eng *core.Engine, opts ...core.LayerOption) (fiber.Handler, error) {
	return adapter.Middleware(eng, ForLayer, opts...)
}

// MustMiddleware is Middleware for configurations known to be valid; it
// panics on error. Use it at start-up only.
func MustMiddleware(eng *core.Engine, opts ...core.LayerOption) fiber.Handler {
	return adapter.Must(Middleware(eng, opts...))
}

type nextKey struct{}
type limitReachedKey struct{}

// Next makes the layer pass the requests fn reports true for straight to
// the next handler, as the Next of Fiber's own middleware configs does: no
// budget is evaluated or charged and no rate-limit header field is
// written.
//
//	fibermw.Next(func(c *fiber.Ctx) bool { return c.Path() == "/healthz" })
func Next(fn func(c *fiber.Ctx) bool) core.LayerOption { return core.Attach(nextKey{}, fn) }

// LimitReached makes h answer the requests the layer denies, as the
// LimitReached of Fiber's limiter.Config does; what it returns is what the
// middleware returns. When h runs, the rate-limit header fields and the
// denial's own fields (Retry-After, Cache-Control, Content-Type) are set,
// and [DecisionFrom] says why the request was denied. h writes status and
// body, for example with c.Status(fiber.StatusTooManyRequests).JSON(...).
func LimitReached(h fiber.Handler) core.LayerOption { return core.Attach(limitReachedKey{}, h) }

// SkipFailedRequests makes the layer count only requests answered with a
// status below 400, as Fiber's limiter option of that name does: the
// charges of a request answered with 400 or above (or whose handler
// returned an error) are given back after the handler. It is
// core.CountWhen(status < 400).
func SkipFailedRequests() core.LayerOption {
	return core.CountWhen(func(status int) bool { return status < 400 })
}

// SkipSuccessfulRequests makes the layer count only requests answered with
// a status of 400 or above, as Fiber's limiter option of that name does:
// the brute-force case, where only failed logins count. It is
// core.CountWhen(status >= 400).
func SkipSuccessfulRequests() core.LayerOption {
	return core.CountWhen(func(status int) bool { return status >= 400 })
}

// KeyGenerator returns a key function that reads the request's *fiber.Ctx,
// in the manner of the KeyGenerator of Fiber's limiter.Config, for budgets
// keyed by something only Fiber knows (a local an authentication middleware
// set). An empty key means the request has none (core.ErrNoKey). The key
// is copied, so fn may return a string that aliases the request. Prefer
// package keyfunc for client IPs and credentials: c.IP() trusts
// forwarding headers when Fiber is configured to.
func KeyGenerator(fn func(c *fiber.Ctx) string) core.KeyFunc {
	return func(r *core.Request) (string, error) {
		c, ok := fastreq.Ctx[*fiber.Ctx](r)
		if !ok {
			return "", fmt.Errorf("fibermw.KeyGenerator: not a Fiber request: %w", core.ErrNoKey)
		}
		if k := fn(c); k != "" {
			return strings.Clone(k), nil
		}
		return "", fmt.Errorf("fibermw.KeyGenerator: empty key: %w", core.ErrNoKey)
	}
}

// ForLayer returns Fiber middleware for an existing layer.
func ForLayer(l *core.Layer) fiber.Handler {
	next, _ := l.Value(nextKey{}).(func(*fiber.Ctx) bool)
	limitReached, _ := l.Value(limitReachedKey{}).(fiber.Handler)
	return func(c *fiber.Ctx) error {
		if next != nil && next(c) {
			return c.Next()
		}
		return router.Serve(l, c, limitReached)
	}
}

// router is the request sequence's view of Fiber v2.
var router = fastreq.Router[*fiber.Ctx]{
	RequestCtx: (*fiber.Ctx).Context,
	Next:       (*fiber.Ctx).Next,
	Route:      func(c *fiber.Ctx) string { return c.Route().Path },
	Context:    (*fiber.Ctx).UserContext,
	ErrStatus: func(err error) int {
		var fe *fiber.Error
		if errors.As(err, &fe) {
			return fe.Code
		}
		return fiber.StatusInternalServerError
	},
}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer or after the request's layers finished.
// Handlers may read it while they serve the request (for example to log
// the remaining quota); they must not modify it or keep it.
func DecisionFrom(c *fiber.Ctx) *core.Decision {
	if c == nil {
		return nil
	}
	return router.Decision(c)
}
