// Package limittest is the conformance suite every quotagate adapter runs,
// in the manner of net/http/httptest: exported functions that take a
// *testing.T and a small constructor.
//
// An adapter's test supplies a [ServeFunc] that turns a router-neutral
// route table (an [App]) into a real HTTP server on 127.0.0.1, and
// optionally the [core.Store] to use. The suite then sends the same HTTP
// requests over real sockets to every adapter and expects the same
// statuses, the same header values byte for byte, the same denial bodies
// and the same counts:
//
//	func TestConformance(t *testing.T) {
//		limittest.Run(t, limittest.Config{Serve: serve})
//	}
//
// Run runs every check; each check is also exported on its own
// ([AllowDeny], [HeaderStyles], [StackedLayers], ...).
//
// # Time
//
// The suite runs on the store's real clock (a Redis store reads the Redis
// server's). Its budgets are token buckets and sliding logs whose
// intervals are whole seconds, so a header value is exact as long as a
// sequence of requests on one key completes within one second; a sequence
// that took longer (an overloaded machine) is repeated on a fresh key, at
// most three times.
package limittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// ValueHeader and ValueKey connect a request header to the router's
// request-scoped values: the server a [ServeFunc] builds copies the
// ValueHeader request header, when present, into the request-scoped values
// under ValueKey before any layer runs, so key functions can read it back
// with core.Request.Value(ValueKey).
const (
	ValueHeader = "X-Limittest-Value"
	ValueKey    = "limittest.value"
)

// App is a router-neutral route table.
type App struct {
	Groups []Group
}

// Group is a route group: a path prefix, the layers applied to every route
// of the group, and the routes.
type Group struct {
	// Prefix is the group's path prefix, e.g. "/v1". It is empty for a group
	// without layers; a group with layers has a prefix that is neither
	// empty nor a prefix of another group's.
	Prefix string
	// Layers apply to every route of the group, outermost first, as group
	// middleware where the router has it.
	Layers []*core.Layer
	// Routes are the group's routes.
	Routes []Route
}

// Route is one route of a group.
type Route struct {
	// Method is the request method, e.g. "POST".
	Method string
	// Path is the route pattern relative to the group's prefix, with
	// ":name" parameters, e.g. "/users/:id". A ServeFunc converts it to the
	// router's syntax ("/users/{id}" for net/http).
	Path string
	// Layers apply to this route only, inside the group's, outermost first.
	Layers []*core.Layer
	// Handle is the handler's work. The handler calls it and answers
	// Status with Content-Type "text/plain; charset=utf-8" and the returned
	// string as the body. Handle may panic.
	Handle func() string
	// Status is the status the handler answers with; 0 means 200. A
	// ServeFunc may answer a Status of 400 or above the way its router's
	// handlers usually do: by returning the router's error
	// (echo.NewHTTPError, fiber.NewError) for its error handler to write.
	Status int
	// HandleContext, when not nil, is called instead of Handle, with the
	// request's context as the handler sees it (net/http's r.Context(),
	// Gin's c.Request.Context(), Echo's c.Request().Context(), Fiber v2's
	// c.UserContext(), Fiber v3's c.Context()), so that the handler can
	// return when a timeout middleware ends it.
	HandleContext func(ctx context.Context) string
	// Timeout, when not zero, puts the route's Layers and handler behind
	// the router's own timeout middleware with this duration, inside the
	// group's layers: see Config.TimeoutStatus. The suite gives such a
	// route a HandleContext that outlasts the timeout, and the handler
	// answers nothing itself: the middleware answers the request, and
	// several routers' timeout middlewares hand the handler's context to
	// another request by the time it returns. Where the middleware learns
	// of the timeout only from the handler (Echo v5's ContextTimeout), the
	// handler returns the context's error.
	Timeout time.Duration
}

// A ServeFunc starts a real HTTP server on 127.0.0.1 for app and returns
// its base URL ("http://127.0.0.1:port"); it stops the server with
// t.Cleanup. The server must:
//
//   - register every route at its group's Prefix + Path for its Method;
//   - pass every request, before any layer, first through the router's
//     panic recovery, answering a panicking handler with status 500, then
//     through a middleware that copies the ValueHeader request header, when
//     present, into the router's request-scoped values under ValueKey
//     (net/http: a context value; Gin: c.Set; Echo: c.Set; Fiber: c.Locals);
//   - apply each group's layers to the group, then each route's layers to
//     the route, using the adapter under test;
//   - answer a route's request as Route.Handle describes;
//   - put a route with a Timeout behind the router's timeout middleware,
//     when Config.TimeoutStatus says the adapter has one.
type ServeFunc func(t *testing.T, app App) string

// Config is what an adapter's test gives the suite.
type Config struct {
	// Serve builds a server for an App. Required.
	Serve ServeFunc
	// Store returns the store an engine of one check uses. Default: a new
	// memstore.Store, closed when the check ends.
	Store func(t *testing.T) core.Store
	// TimeoutStatus is the status with which the router's own timeout
	// middleware answers a request whose handler outlasts it (503 for
	// net/http's http.TimeoutHandler and Echo's, 408 for Fiber's and
	// gin-contrib/timeout's): the ServeFunc puts each Route with a Timeout
	// behind that middleware, for [TimeoutChain] and [TimeoutUnderLoad].
	// Zero means the adapter supplies none, and both are skipped. A middleware that keeps
	// running the chain on a goroutine of its own with a router context
	// the router recycles once the middleware returns (Fiber v2's
	// timeout.New, Echo v4's Timeout, gin-contrib/timeout) races with the
	// router by its design, and the race detector reports the router's
	// own accesses: an adapter may leave TimeoutStatus zero under it.
	TimeoutStatus int
}

// Run runs every check of the suite as a subtest.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	checks := []struct {
		name string
		fn   func(*testing.T, Config)
	}{
		{"AllowDeny", AllowDeny},
		{"Concurrent", Concurrent},
		{"HeaderStyles", HeaderStyles},
		{"RetryAfter", RetryAfter},
		{"IgnoreMethods", IgnoreMethods},
		{"StackedLayers", StackedLayers},
		{"MixedStyles", MixedStyles},
		{"RefundedReset", RefundedReset},
		{"Cost", Cost},
		{"MissingKey", MissingKey},
		{"RequestView", RequestView},
		{"ReplacedDenial", ReplacedDenial},
		{"Panic", Panic},
		{"StructuredFields", StructuredFields},
		{"Golden", Golden},
		{"Shaping", Shaping},
		{"Skip", Skip},
		{"CountWhen", CountWhen},
		{"Disconnect", Disconnect},
		{"Overload", Overload},
		{"ShedOnly", ShedOnly},
		{"InFlight", InFlight},
		{"TimeoutChain", TimeoutChain},
		{"TimeoutUnderLoad", TimeoutUnderLoad},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.fn(t, cfg) })
	}
}

// engine returns an engine over the configured store with budgets.
func engine(t *testing.T, cfg Config, budgets ...core.Budget) *core.Engine {
	t.Helper()
	var st core.Store
	if cfg.Store != nil {
		st = cfg.Store(t)
	} else {
		ms, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ms.Close() })
		st = ms
	}
	eng, err := core.New(core.Config{Store: st, Budgets: budgets})
	if err != nil {
		t.Fatalf("limittest: engine: %v", err)
	}
	return eng
}

func layer(t *testing.T, eng *core.Engine, opts ...core.LayerOption) *core.Layer {
	t.Helper()
	l, err := eng.Layer(opts...)
	if err != nil {
		t.Fatalf("limittest: layer: %v", err)
	}
	return l
}

// ClientHeader carries the key of the suite's budgets: every check keys its
// budgets by this request header, with a fresh random value per sequence,
// so checks never share state, even on a shared store.
const ClientHeader = "X-Limittest-Client"

// byClient keys a request by ClientHeader.
func byClient(r *core.Request) (string, error) {
	if v := r.Header.Get(ClientHeader); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("no %s header: %w", ClientHeader, core.ErrNoKey)
}

// newID returns a fresh random client id.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// counter counts handler calls.
type counter struct{ n atomic.Int64 }

func (c *counter) handle(body string) func() string {
	return func() string { c.n.Add(1); return body }
}

func route(method, path string, c *counter, layers ...*core.Layer) Route {
	if c == nil {
		c = new(counter)
	}
	return Route{Method: method, Path: path, Layers: layers, Handle: c.handle("ok")}
}

// client talks to one server.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	t.Helper()
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}
	hc := &http.Client{Transport: tr, Timeout: 15 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: strings.TrimRight(base, "/"), hc: hc}
}

// response is what the suite reads from a response.
type response struct {
	Status int
	Header http.Header
	Body   string
	// Local is the client side of the connection that carried the request.
	Local string
}

// send performs one request; hdr holds header name/value pairs (a name may
// repeat, giving several field lines). It reports errors instead of
// failing, so it may run on any goroutine.
func (c *client) send(method, path string, hdr ...string) (response, error) {
	var local string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { local = i.Conn.LocalAddr().String() }}
	ctx := httptrace.WithClientTrace(context.Background(), trace)
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading body: %w", method, path, err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: string(body), Local: local}, nil
}

// do is send for the test goroutine: it fails the test on error.
func (c *client) do(method, path string, hdr ...string) response {
	c.t.Helper()
	r, err := c.send(method, path, hdr...)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// reporter is where checks report mismatches: a *testing.T, or a recorder
// for a sequence that may be repeated.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder collects the mismatches of one run of a sequence.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// attempts is how many times oneSecond runs a sequence.
const attempts = 3

// oneSecond runs seq on a fresh client id. When seq reports mismatches and
// took a second or more (see the package documentation on time), it runs
// it again on another fresh id, at most attempts times; the mismatches of
// the last run are reported. Mismatches of a run that took less than a
// second are reported at once.
func oneSecond(t *testing.T, seq func(r reporter, id string)) {
	t.Helper()
	for i := 1; ; i++ {
		var rec recorder
		start := time.Now()
		seq(&rec, newID())
		took := time.Since(start)
		if len(rec.errs) == 0 {
			return
		}
		if took >= time.Second && i < attempts {
			t.Logf("attempt %d took %v, over a second, and saw %d mismatches; repeating on a fresh key", i, took, len(rec.errs))
			continue
		}
		for _, e := range rec.errs {
			t.Error(e)
		}
		return
	}
}

// header returns the single value of the named field, reporting a repeated
// field.
func header(t reporter, r response, name string) string {
	t.Helper()
	v := r.Header.Values(name)
	if len(v) > 1 {
		t.Errorf("%s: %d field lines %q, want one", name, len(v), v)
	}
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// wantStatus reports a status other than want; it returns whether the
// status matched.
func wantStatus(t reporter, r response, want int, what string) bool {
	t.Helper()
	if r.Status != want {
		t.Errorf("%s: status %d, want %d (body %q)", what, r.Status, want, r.Body)
		return false
	}
	return true
}

func wantHeader(t reporter, r response, name, want, what string) {
	t.Helper()
	if got := header(t, r, name); got != want {
		t.Errorf("%s: %s = %q, want %q", what, name, got, want)
	}
}

func wantNoHeader(t reporter, r response, what string, names ...string) {
	t.Helper()
	for _, n := range names {
		if v, ok := r.Header[http.CanonicalHeaderKey(n)]; ok {
			t.Errorf("%s: unexpected %s %q", what, n, v)
		}
	}
}

// rateLimitFields are every rate-limit field name the styles write.
var rateLimitFields = []string{
	core.HeaderPolicy, core.HeaderRateLimit,
	core.HeaderLimit, core.HeaderRemaining, core.HeaderReset,
	core.HeaderXLimit, core.HeaderXRemaining, core.HeaderXReset,
}

// exceptFields returns rateLimitFields without keep.
func exceptFields(keep ...string) []string {
	var out []string
outer:
	for _, f := range rateLimitFields {
		for _, k := range keep {
			if f == k {
				continue outer
			}
		}
		out = append(out, f)
	}
	return out
}
