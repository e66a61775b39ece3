package fastreq

import (
	"context"
	"sync"

	"github.com/quotagate/quotagate/core"
	"github.com/valyala/fasthttp"
)

// Router is what one Fiber major gives the request sequence: how to reach
// a request's fasthttp context from its own context type C (*fiber.Ctx for
// v2, fiber.Ctx for v3), call the rest of the chain, and read what it
// reports. Each adapter declares one, as a package variable.
type Router[C any] struct {
	// RequestCtx returns the request's fasthttp context.
	RequestCtx func(C) *fasthttp.RequestCtx
	// Next runs the rest of the chain.
	Next func(C) error
	// Route is the path the running handler was registered with.
	Route func(C) string
	// Context is the request's user context.
	Context func(C) context.Context
	// ErrStatus is the status Fiber's error handler gives a handler's
	// error (a *fiber.Error's code, else 500).
	ErrStatus func(error) int

	pool sync.Pool
}

// key is the user-value key of a request's State.
type key[C any] struct{}

// State is a Fiber request's state, shared by its stacked layers and kept
// in its user values: the core.RequestState, and the context and LimitReached
// handler of the latest layer. It is pooled: it returns to the pool when
// the outermost layer's Next returns.
//
// A State is also the latest layer's core.Exchange: the sequence
// writes and denies before it calls Next, when no inner layer has replaced
// C and LimitReached yet, so it costs no allocation.
type State[C any] struct {
	core.RequestState
	c            C
	limitReached func(C) error
	r            *Router[C]
	buf          []byte // a header field being written
	vals         []byte // the header values of the latest layer
	conn         Conn
}

// Serve runs layer l's sequence for the request of c; limitReached, when
// not nil, answers a denial.
func (r *Router[C]) Serve(l *core.Layer, c C, limitReached func(C) error) error {
	fc := r.RequestCtx(c)
	st, _ := fc.UserValue(key[C]{}).(*State[C])
	if st == nil {
		st, _ = r.pool.Get().(*State[C])
		if st == nil {
			st = &State[C]{r: r}
		}
		uri := fc.URI()
		st.Request = core.Request{
			Method: Method(fc.Method()),
			Header: (*Header)(&fc.Request.Header),
			Values: (*locals[C])(st),
		}
		st.Request.RemoteAddr, st.Request.Path, st.Request.RawQuery = st.conn.Owned(fc.RemoteAddr(), uri.Path(), uri.QueryString())
		fc.SetUserValue(key[C]{}, st)
		defer r.release(fc, st)
	}
	st.c = c // a mounted app shares the request but not always the context
	st.limitReached = limitReached
	st.Request.Route = r.Route(c)
	st.Request.Context = r.Context(c)
	return l.Serve(&st.RequestState, st)
}

// release returns st to the pool once the outermost layer is done.
func (r *Router[C]) release(fc *fasthttp.RequestCtx, st *State[C]) {
	fc.RemoveUserValue(key[C]{})
	st.Reset()
	var zero C
	st.c, st.limitReached = zero, nil
	r.pool.Put(st)
}

// Decision returns the decision of the request of c, or nil outside a
// quotagate layer or after the request's layers finished.
func (r *Router[C]) Decision(c C) *core.Decision {
	if st, ok := r.RequestCtx(c).UserValue(key[C]{}).(*State[C]); ok {
		return &st.Decision
	}
	return nil
}

// Ctx returns the router context of the request req views, for key
// functions made from a function of it; false outside a Fiber request.
func Ctx[C any](req *core.Request) (C, bool) {
	if lv, ok := req.Values.(*locals[C]); ok {
		return lv.c, true
	}
	var zero C
	return zero, false
}

// FieldBuffer returns the state's pooled buffer (SetHeader copies), large
// enough for the fields of several budgets, so it rarely grows.
func (st *State[C]) FieldBuffer() []byte {
	if cap(st.vals) < fieldBuf {
		st.vals = make([]byte, 0, fieldBuf)
	}
	return st.vals[:0]
}

// fieldBuf is the size of a state's header value buffer.
const fieldBuf = 256

// SetHeader copies name and value into the response header.
func (st *State[C]) SetHeader(name, value string) {
	st.buf = SetHeader(&st.r.RequestCtx(st.c).Response.Header, st.buf, name, value)
}

// DelHeader removes name from the response header.
func (st *State[C]) DelHeader(name string) { st.r.RequestCtx(st.c).Response.Header.Del(name) }

// Deny sets the denial's fields and answers it with the layer's
// LimitReached handler, or with its status and body.
func (st *State[C]) Deny(_ *core.Decision, den core.Denial) error {
	res := &st.r.RequestCtx(st.c).Response
	SetFields(&res.Header, den.Header)
	if st.limitReached != nil {
		return st.limitReached(st.c)
	}
	res.SetStatusCode(den.Status)
	res.SetBody(den.Body)
	return nil
}

// Next runs the rest of the chain and reports the status the response got,
// or the one Fiber's error handler will give the chain's error.
func (st *State[C]) Next(bool) (int, error) {
	c, r := st.c, st.r // inner layers replace st.c
	if err := r.Next(c); err != nil {
		return r.ErrStatus(err), err
	}
	return r.RequestCtx(c).Response.StatusCode(), nil
}

// locals reads Fiber locals as a core.ValueReader. String values are
// copied, since a local may hold a string borrowed from the request.
type locals[C any] State[C]

func (v *locals[C]) Value(key any) any { return Local(v.r.RequestCtx(v.c), key) }
