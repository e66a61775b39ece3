package adapter_test

import (
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
)

// This file is a whole router adapter: the toy router's
// (toyrouter_test.go), from exported pieces only, as the built-in adapters
// are made. It passes core/limittest, timeout chain included
// (conformance_test.go); the package doc says what each piece is for. A
// real adapter adds one-line functions around this package's (Middleware,
// MustMiddleware, ShedBy, Store, BudgetName), and its router's options.

// LimitBy returns middleware that allows each key quota requests per
// window and denies the rest with 429: the one-call start.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) MiddlewareFunc {
	return ForLayer(adapter.MustLimitBy(quota, window, key, opts...))
}

// state is what the layers of one request share.
type state struct{ core.RequestState }

var states = sync.Pool{New: func() any { return new(state) }}

// sharedKey is the router value under which the outermost layer leaves
// the request's Shared, which is not pooled: a layer that comes after
// every other left must find it spent, not serving another request.
type sharedKey struct{}

// ForLayer returns middleware for an existing layer.
func ForLayer(l *core.Layer) MiddlewareFunc {
	return func(next HandlerFunc) HandlerFunc {
		return func(c *Ctx) {
			sh, _ := c.Value(sharedKey{}).(*adapter.Shared[state])
			x := &exchange{c: c, sh: sh, outermost: sh == nil, next: next}
			var st *state
			if x.outermost {
				x.sh, st = new(adapter.Shared[state]), states.Get().(*state)
				x.sh.Start(st)
				r := c.Request()
				st.Request = core.Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
					Route: c.Route(), RemoteAddr: r.RemoteAddr, Header: r.Header, Values: x, Context: r.Context()}
				c.Set(sharedKey{}, x.sh)
			} else if st = sh.Enter(); st == nil {
				next(c) // the request's layers have all returned: serve it unlimited
				return
			}
			defer func() {
				if last := x.sh.Leave(x.outermost); last != nil {
					last.Reset()
					states.Put(last)
				}
			}()
			_ = l.Serve(&st.RequestState, x)
		}
	}
}

// DecisionFrom returns the decision made for c's request, or nil outside
// a layer or once the request's layers have returned.
func DecisionFrom(c *Ctx) *core.Decision {
	if sh, ok := c.Value(sharedKey{}).(*adapter.Shared[state]); ok {
		if st := sh.State(); st != nil {
			return &st.Decision
		}
	}
	return nil
}

// exchange is one layer's core.Exchange; the outermost layer's is also
// the request's core.ValueReader.
type exchange struct {
	c         *Ctx
	sh        *adapter.Shared[state]
	outermost bool
	next      HandlerFunc
}

// Value reads the router's values for key functions. An inner layer's
// key functions may run after the router recycled c, so every read is a
// use of c (while the outermost layer runs, Use always reports true).
func (x *exchange) Value(key any) any {
	defer x.sh.Release()
	if !x.sh.Use() {
		return nil
	}
	return x.c.Value(key)
}

// use begins a use of c and reports whether the layer may make it; call
// done after it, whatever it reported. The router recycles c only once
// the outermost layer returned, so that layer needs no bracket.
func (x *exchange) use() bool { return x.outermost || x.sh.Use() }

func (x *exchange) done() {
	if !x.outermost {
		x.sh.Release()
	}
}

// FieldBuffer returns nil: core renders into an array of its own, never
// written again, so SetHeader needs no copy.
func (x *exchange) FieldBuffer() []byte { return nil }

func (x *exchange) SetHeader(name, value string) { x.header(name, value) }
func (x *exchange) DelHeader(name string)        { x.header(name) }

// header sets name to values, or removes it when there are none.
func (x *exchange) header(name string, values ...string) {
	if x.use() {
		x.c.SetHeader(name, values...)
	}
	x.done()
}

func (x *exchange) Deny(_ *core.Decision, den core.Denial) error {
	if x.use() {
		for name, v := range den.Header {
			x.c.SetHeader(name, v...)
		}
		x.c.Send(den.Status, den.Body)
	}
	x.done()
	return nil
}

// Next runs the rest of the chain, outside the bracket (a timeout
// middleware's answer must not wait for the handler), and reports the
// status it answered with when asked, for core.CountWhen and guards.
func (x *exchange) Next(status bool) (int, error) {
	ok := x.use()
	x.done()
	if !ok {
		return 0, nil
	}
	x.next(x.c)
	if !status {
		return 0, nil
	}
	defer x.done()
	if !x.use() {
		return 0, nil
	}
	return x.c.Status(), nil
}
