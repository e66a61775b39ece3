// Package fibermw puts quotagate in front of Fiber (v2) handlers.
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
// released when the outermost layer's c.Next returns; [DecisionFrom] reads
// it until then.
package fibermw

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/internal/fastreq"
	"github.com/valyala/fasthttp"
)

// LimitBy returns Fiber middleware that allows each key quota requests per
// window and denies the rest with 429: the one-call start.
//
//	app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
//
// It counts in memory, on this instance, with a sliding window (a budget
// named "default"), and answers with the IETF RateLimit-Policy and
// RateLimit header fields. opts are the layer options Middleware takes
// (Next, LimitReached, SkipFailedRequests, core.Cost, ...): when the policy
// grows, build an engine with core.New and pass the same options to
// Middleware. LimitBy panics when quota, window or key is invalid, so call
// it at start-up.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) fiber.Handler {
	return ForLayer(adapter.MustLimitBy(quota, window, key, opts...))
}

// Middleware returns Fiber middleware that applies a layer of eng's budgets,
// configured by opts: core.Use, core.Cost, core.CostOf, core.CostFrom,
// core.Skip, core.CountWhen, core.WithDeny, core.WithHeaders, and this
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
func Next(fn func(c *fiber.Ctx) bool) core.LayerOption { return adapter.Option(nextKey{}, fn) }

// LimitReached makes h answer the requests the layer denies, as the
// LimitReached of Fiber's limiter.Config does; what it returns is what the
// middleware returns. When h runs, the rate-limit header fields and the
// denial's own fields (Retry-After, Cache-Control, Content-Type) are set,
// and [DecisionFrom] says why the request was denied. h writes status and
// body, for example with c.Status(fiber.StatusTooManyRequests).JSON(...).
func LimitReached(h fiber.Handler) core.LayerOption { return adapter.Option(limitReachedKey{}, h) }

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
		lv, ok := r.Values.(*locals)
		if !ok {
			return "", fmt.Errorf("fibermw.KeyGenerator: not a Fiber request: %w", core.ErrNoKey)
		}
		if k := fn(lv.c); k != "" {
			return strings.Clone(k), nil
		}
		return "", fmt.Errorf("fibermw.KeyGenerator: empty key: %w", core.ErrNoKey)
	}
}

// ForLayer returns Fiber middleware for an existing layer.
func ForLayer(l *core.Layer) fiber.Handler {
	next, _ := adapter.Value(l, nextKey{}).(func(*fiber.Ctx) bool)
	limitReached, _ := adapter.Value(l, limitReachedKey{}).(fiber.Handler)
	return func(c *fiber.Ctx) error {
		if next != nil && next(c) {
			return c.Next()
		}
		return serve(l, c, limitReached)
	}
}

type stateKey struct{}

// requestState is the per-request state shared by stacked layers, kept in
// the request's locals: the request view and the decision. It is pooled:
// it returns to the pool when the outermost layer's c.Next returns.
type requestState struct {
	adapter.State
	c            *fiber.Ctx    // the latest layer's
	limitReached fiber.Handler // the latest layer's
	buf          []byte        // a header field being written
	vals         []byte        // the header values of the latest layer
	conn         fastreq.Conn
}

var statePool = sync.Pool{New: func() any { return new(requestState) }}

// DecisionFrom returns the decision made for the request of c, or nil
// outside a quotagate layer or after the request finished (the outermost
// layer's c.Next returned). Handlers may read it while they serve the
// request (for example to log the remaining quota); they must not modify it
// or keep it.
func DecisionFrom(c *fiber.Ctx) *core.Decision {
	if c == nil {
		return nil
	}
	if st, ok := c.Context().UserValue(stateKey{}).(*requestState); ok {
		return &st.Decision
	}
	return nil
}

func serve(l *core.Layer, c *fiber.Ctx, limitReached fiber.Handler) error {
	fc := c.Context()
	st, _ := fc.UserValue(stateKey{}).(*requestState)
	if st == nil {
		st = statePool.Get().(*requestState)
		uri := fc.URI()
		st.Request = core.Request{
			Method: fastreq.Method(c.Method()),
			Header: (*fastreq.Header)(&fc.Request.Header),
			Values: (*locals)(st),
		}
		st.Request.RemoteAddr, st.Request.Path, st.Request.RawQuery = st.owned(fc.RemoteAddr(), uri.Path(), uri.QueryString())
		fc.SetUserValue(stateKey{}, st)
		defer release(fc, st)
	}
	st.c = c // a mounted app shares the request but not always the Ctx
	st.limitReached = limitReached
	st.Request.Route = c.Route().Path
	st.Request.Context = c.UserContext()
	return adapter.Serve(l, &st.State, (*exchange)(st))
}

// exchange is the adapter.Exchange of the request's latest layer: the
// sequence writes and denies before it calls Next, when no inner layer has
// replaced the state's c and limitReached yet. Being the state itself, it
// costs no allocation.
type exchange requestState

// FieldBuffer returns the state's pooled buffer (SetHeader copies), large
// enough for the fields of several budgets, so it rarely grows.
func (x *exchange) FieldBuffer() []byte {
	if cap(x.vals) < fieldBuf {
		x.vals = make([]byte, 0, fieldBuf)
	}
	return x.vals[:0]
}

// fieldBuf is the size of a state's header value buffer.
const fieldBuf = 256

// SetHeader copies name and value into the response header. Field names
// are in canonical form already: SetCanonical skips fasthttp's
// normalization, which Set would do on a copy.
func (x *exchange) SetHeader(name, value string) {
	x.buf = fastreq.SetHeader(&x.c.Context().Response.Header, x.buf, name, value)
}

func (x *exchange) DelHeader(name string) { x.c.Context().Response.Header.Del(name) }

func (x *exchange) Deny(d *core.Decision, den core.Denial) error {
	fastreq.SetFields(&x.c.Context().Response.Header, den.Header)
	if x.limitReached != nil {
		return x.limitReached(x.c)
	}
	x.c.Context().Response.SetStatusCode(den.Status)
	x.c.Context().Response.SetBody(den.Body)
	return nil
}

func (x *exchange) Next(bool) (int, error) {
	c := x.c // inner layers replace x.c
	err := c.Next()
	if err == nil {
		return c.Response().StatusCode(), nil
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code, err
	}
	return fiber.StatusInternalServerError, err
}

// release returns st to the pool once the outermost layer is done.
func release(fc *fasthttp.RequestCtx, st *requestState) {
	fc.RemoveUserValue(stateKey{})
	st.Reset()
	st.c, st.limitReached = nil, nil
	statePool.Put(st)
}

// owned, appendAddr and shortTail are package fastreq's, under the names
// this package's tests use.
func (st *requestState) owned(addr net.Addr, path, query []byte) (remote, p, q string) {
	return st.conn.Owned(addr, path, query)
}

var appendAddr = fastreq.AppendAddr

const shortTail = fastreq.ShortTail

// locals reads Fiber locals as a core.ValueReader. String values are
// copied, since a local may hold a string borrowed from the request.
type locals requestState

func (v *locals) Value(key any) any { return fastreq.Local(v.c.Context(), key) }
