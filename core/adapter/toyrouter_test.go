package adapter_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The toy router that example_router_test.go adapts. It routes by method
// and path (a ":name" segment matches any one segment), runs middleware
// around handlers as net/http does, and, like Gin, pools its request
// context (*Ctx), which it hands to the next request as soon as the
// request's outermost handler returns. Its Timeout runs the rest of the
// chain on a goroutine of its own with the same *Ctx, as gin-contrib/timeout
// does: a layer behind it may still run when the router recycles that Ctx.
//
// Unlike Gin's, a Ctx's methods lock it, so that a use after it was
// recycled is no data race but only a wrong answer: another request's,
// or, on a Strict router, a use counted in StaleUses.

// HandlerFunc serves a request.
type HandlerFunc func(c *Ctx)

// MiddlewareFunc wraps a handler.
type MiddlewareFunc func(next HandlerFunc) HandlerFunc

// Ctx is one request's context: its request, response and values.
type Ctx struct {
	mu     sync.Mutex
	rt     *Router
	spent  bool                // recycled by a Strict router
	w      http.ResponseWriter // nil once Timeout answered or the router recycled c
	r      *http.Request
	route  string
	status int
	vals   map[any]any
}

// lock locks c, counting a use of a spent c.
func (c *Ctx) lock() {
	c.mu.Lock()
	if c.spent {
		c.rt.StaleUses.Add(1)
	}
}

// Request returns the request; nil once the router recycled c.
func (c *Ctx) Request() *http.Request {
	c.lock()
	defer c.mu.Unlock()
	return c.r
}

// Route returns the path pattern the request matched.
func (c *Ctx) Route() string {
	c.lock()
	defer c.mu.Unlock()
	return c.route
}

// Value returns the request's value for key.
func (c *Ctx) Value(key any) any {
	c.lock()
	defer c.mu.Unlock()
	return c.vals[key]
}

// Set sets the request's value for key.
func (c *Ctx) Set(key, v any) {
	c.lock()
	defer c.mu.Unlock()
	if c.vals == nil {
		c.vals = make(map[any]any)
	}
	c.vals[key] = v
}

// SetHeader sets the response header field name to values, or removes it
// when there are none.
func (c *Ctx) SetHeader(name string, values ...string) {
	c.lock()
	defer c.mu.Unlock()
	switch {
	case c.w == nil:
	case len(values) == 0:
		delete(c.w.Header(), name)
	default:
		c.w.Header()[name] = values
	}
}

// Send answers with status, unless an answer was started (then the body
// adds to it), and body.
func (c *Ctx) Send(status int, body []byte) {
	c.lock()
	defer c.mu.Unlock()
	if c.w == nil {
		return
	}
	if c.status == 0 {
		c.status = status
		c.w.WriteHeader(status)
	}
	_, _ = c.w.Write(body)
}

// Status returns the status the answer was sent with; 0 before.
func (c *Ctx) Status() int {
	c.lock()
	defer c.mu.Unlock()
	return c.status
}

// Router routes requests; the zero Router has no routes.
type Router struct {
	// Strict makes the router mark a request's Ctx spent when it
	// recycles it, instead of pooling it, and count every later use of it
	// in StaleUses: for tests, where a pooled Ctx would make such a use
	// another request's, which few checks would see.
	Strict    bool
	StaleUses atomic.Int64

	mw     []MiddlewareFunc
	routes []route
	ctxs   sync.Pool
}

type route struct {
	method, path string
	segs         []string
	h            HandlerFunc
}

// Use adds mw, outermost first, around the routes added after it.
func (rt *Router) Use(mw ...MiddlewareFunc) { rt.mw = append(rt.mw, mw...) }

// Handle routes method and path to h behind mw, outermost first, inside
// the router's own middleware.
func (rt *Router) Handle(method, path string, h HandlerFunc, mw ...MiddlewareFunc) {
	all := append(slices.Clone(rt.mw), mw...)
	for i := len(all) - 1; i >= 0; i-- {
		h = all[i](h)
	}
	rt.routes = append(rt.routes, route{method, path, strings.Split(path, "/"), h})
}

func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, path := rt.match(r)
	c, _ := rt.ctxs.Get().(*Ctx)
	if c == nil {
		c = new(Ctx)
	}
	c.mu.Lock()
	c.rt, c.w, c.r, c.route = rt, w, r, path
	c.mu.Unlock()
	h(c)
	// The outermost handler returned: c serves the next request.
	c.mu.Lock()
	c.w, c.r, c.route, c.status, c.vals, c.spent = nil, nil, "", 0, nil, rt.Strict
	c.mu.Unlock()
	if !rt.Strict {
		rt.ctxs.Put(c)
	}
}

func (rt *Router) match(r *http.Request) (HandlerFunc, string) {
	segs := strings.Split(r.URL.Path, "/")
next:
	for _, rr := range rt.routes {
		if rr.method != r.Method || len(rr.segs) != len(segs) {
			continue
		}
		for i, s := range rr.segs {
			if s != segs[i] && (!strings.HasPrefix(s, ":") || segs[i] == "") {
				continue next
			}
		}
		return rr.h, rr.path
	}
	return func(c *Ctx) { c.Send(http.StatusNotFound, nil) }, ""
}

// Timeout runs the rest of the chain on a goroutine of its own, with a
// request whose context ends after d, and answers 503 when d passes
// first; what the chain writes after that is dropped. The router then
// hands c to the next request while the chain may still run with it.
func Timeout(d time.Duration) MiddlewareFunc {
	return func(next HandlerFunc) HandlerFunc {
		return func(c *Ctx) {
			ctx, cancel := context.WithTimeout(c.Request().Context(), d)
			defer cancel()
			c.mu.Lock()
			c.r = c.r.WithContext(ctx)
			c.mu.Unlock()
			done := make(chan any, 1) // what the chain panicked with, or nil
			go func() {
				defer func() { done <- recover() }()
				next(c)
			}()
			select {
			case p := <-done:
				if p != nil {
					panic(p)
				}
			case <-ctx.Done():
				c.Send(http.StatusServiceUnavailable, []byte("timeout"))
				c.mu.Lock()
				c.w = nil
				c.mu.Unlock()
			}
		}
	}
}
