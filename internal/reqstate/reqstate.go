// Package reqstate is the per-request state that quotagate's adapters for
// routers built on *http.Request (nethttp, ginmw, echomw, echomw/echov5)
// share between the stacked layers of one request, and the part of their
// core.Exchange that writes an http.Header.
//
// The outermost layer creates a Context, a small allocation that becomes the
// request's context and carries a pooled State (the core.RequestState every
// layer appends to). Every layer holds a reference while it runs; the last
// one out returns the State to the pool. So a layer that keeps running
// after the outer one returned (behind a timeout middleware that serves the
// rest of the chain on another goroutine) never works on recycled state.
//
// Gin and Echo pool their own request contexts (*gin.Context,
// echo.Context) and hand them to another request once the middleware
// that created the Context returns. So from then on a layer reaches
// the router's context no more: an adapter brackets every use of it (to
// answer a denial, run the rest of the chain, read the status) with
// Context.Use and Context.Release (adapter.Shared's), which order that use
// against the first layer's return.
package reqstate

import (
	"context"
	"net/http"
	"sync"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
)

type key struct{}

// State is what the layers of one request share.
type State struct {
	core.RequestState
	slot Slot
	// Owner is the router's own request context (*gin.Context,
	// echo.Context), for the adapter's value reader; nil for net/http.
	Owner any
}

var pool = sync.Pool{New: func() any { return new(State) }}

// Context is a request's context inside quotagate layers. Its
// adapter.Shared counts the layers running on the State and orders their
// uses of the router's context against the first layer's return.
type Context struct {
	context.Context
	adapter.Shared[State]
	// The header values written for the request: the response header map
	// references them, so they live here, outside the pooled State. The
	// first layer renders them into buf, which is written once and never
	// again, so the values can alias it.
	vals [3]string
	buf  [fieldBuf]byte
}

// fieldBuf is how many bytes of header values a Context holds without
// another allocation: the RateLimit members of one or two budgets (a
// RateLimit-Policy of budgets at their configured quotas is not copied).
const fieldBuf = 56

// Value returns c for the package's key and defers to the parent otherwise.
func (c *Context) Value(k any) any {
	if _, ok := k.(key); ok {
		return c
	}
	return c.Context.Value(k)
}

// Enter returns the quotagate context and state of the request whose
// context is parent. When parent carries none, it creates them and reports
// created: the caller must then make c the request's context. When the
// request's layers have all finished (a handler kept the request past its
// end), it returns a nil State: serve without limiting. Unless State is
// nil, the caller must call c.Leave when its layer is done.
func Enter(parent context.Context) (c *Context, st *State, created bool) {
	if c, _ = parent.Value(key{}).(*Context); c != nil {
		return c, c.Shared.Enter(), false
	}
	st = pool.Get().(*State)
	c = &Context{Context: parent}
	c.Start(st)
	return c, st, true
}

// Leave drops the caller's reference; first says the caller is the layer
// that created c (Enter reported created), whose return hands the request
// back to the router. The last layer out returns the State to the pool.
func (c *Context) Leave(first bool) {
	st := c.Shared.Leave(first)
	if st == nil {
		return
	}
	st.Reset()
	st.Owner = nil
	st.slot = Slot{}
	pool.Put(st)
}

// Decision returns the decision of the request whose context is ctx, or nil
// outside a quotagate layer or once its layers have finished.
func Decision(ctx context.Context) *core.Decision {
	if c, ok := ctx.Value(key{}).(*Context); ok {
		if st := c.State(); st != nil {
			return &st.Decision
		}
	}
	return nil
}

// Slot is storage for a layer's core.Exchange: an adapter's exchange
// type is a Slot (type exchange reqstate.Slot), so that the exchange, which
// the request sequence holds through an interface, costs no allocation.
//
// The request's layers share the State's one Slot: each layer fills it
// before its sequence starts, and its exchange reads it only until it
// calls the rest of the chain (Next copies what it needs first). So an
// inner layer, which runs inside that call, may refill it; and an outer
// layer that finishes while an inner one still runs (behind a timeout
// middleware) no longer reads it.
type Slot struct {
	Header
	// W and R are the layer's response writer and request.
	W http.ResponseWriter
	R *http.Request
	// Router is the router's request context (*gin.Context, echo.Context).
	Router any
	// Chain is the rest of the chain, in the router's type.
	Chain any
	// Layer is the adapter's own per-layer value (its options).
	Layer any
}

// Fill fills the request view from r for the layer that created c (Enter
// reported created), and returns r with c as its context, to become the
// request the rest of the chain sees. values reads the router's
// request-scoped values (nil for net/http).
//
// Request.Value falls back to c, the context of the request as the
// outermost layer saw it: context values that middleware after that layer
// adds are not visible to key functions, router values (values) are.
func (st *State) Fill(r *http.Request, c *Context, values core.ValueReader) *http.Request {
	st.Request = core.Request{
		Method:     r.Method,
		Path:       r.URL.Path,
		RawQuery:   r.URL.RawQuery,
		RemoteAddr: r.RemoteAddr,
		Header:     r.Header,
		Values:     values,
		Context:    c,
	}
	return r.WithContext(c)
}

// Exchange returns the State's Slot, zeroed, for the layer about to run.
func (st *State) Exchange() *Slot {
	st.slot = Slot{}
	return &st.slot
}

// Header is the header-writing part of an core.Exchange for a
// response whose header is an http.Header.
type Header struct {
	H     http.Header
	C     *Context
	First bool // the layer created C
	n     int  // values used so far
}

// FieldBuffer returns the Context's own array for the layer that created
// it, which is written once, so the header values can alias it without a
// copy; a later layer gets a buffer of its own, because it may write
// another header map (a timeout middleware gives the rest of the chain its
// own) while the first one's is still read.
func (h *Header) FieldBuffer() []byte {
	if h.First {
		return h.C.buf[:0:len(h.C.buf)]
	}
	return make([]byte, 0, 2*fieldBuf)
}

// SetHeader sets name to value, which aliases the buffer of FieldBuffer.
func (h *Header) SetHeader(name, value string) {
	if h.First && h.n < len(h.C.vals) {
		h.C.vals[h.n] = value
		h.H[name] = h.C.vals[h.n : h.n+1 : h.n+1]
		h.n++
		return
	}
	h.H[name] = []string{value}
}

// DelHeader removes name.
func (h *Header) DelHeader(name string) { delete(h.H, name) }

// WriteDenial sets den's header fields on h.
func (h *Header) WriteDenial(den core.Denial) {
	for k, v := range den.Header {
		h.H[k] = v
	}
}

// Use brackets a use of the router's own request context, as
// adapter.Shared.Use does, and reports whether the layer may make it. The
// layer that created C needs no bracket (the router recycles its context
// only after that layer returns), so for it Use reports true at once.
func (h *Header) Use() bool {
	if h.First {
		return true
	}
	return h.C.Use()
}

// Release ends a use that Use began.
func (h *Header) Release() {
	if !h.First {
		h.C.Release()
	}
}
