// Package reqstate is the per-request state that quotagate's adapters for
// routers built on *http.Request (nethttp, ginmw, echomw, echomw/echov5)
// share between the stacked layers of one request, and the part of their
// core.Exchange that writes an http.Header.
//
// The outermost layer creates a Context, a small allocation that becomes the
// request's context and carries a pooled core.RequestState (the state every
// layer appends to) and the storage of its adapter's exchange. Every layer
// holds a reference while it runs; the last one out returns the state to
// the pool. So a layer that keeps running after the outer one returned
// (behind a timeout middleware that serves the rest of the chain on another
// goroutine) never works on recycled state.
//
// Gin and Echo pool their own request contexts (*gin.Context,
// echo.Context) and hand them to another request once the middleware
// that created the Context returns. So from then on a layer reaches
// the router's context no more: an adapter brackets every use of it (to
// answer a denial, run the rest of the chain, read the status) with
// Shared.Use and Shared.Release (adapter.Shared's), which order that use
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

var pool = sync.Pool{New: func() any { return new(core.RequestState) }}

// Shared is the part of a request's quotagate context that the layers of
// every adapter use: its adapter.Shared counts the layers running on the
// state and orders their uses of the router's context against the first
// layer's return.
type Shared struct {
	adapter.Shared[core.RequestState]
	// The header values written for the request: the response header map
	// references them, so they live here, outside the pooled state. The
	// first layer renders them into buf, which is written once and never
	// again, so the values can alias it.
	vals [3]string
	buf  [fieldBuf]byte
}

// fieldBuf is how many bytes of header values a Context holds without
// another allocation: the RateLimit members of one or two budgets (a
// RateLimit-Policy of budgets at their configured quotas is not copied).
const fieldBuf = 56

// Context is a request's context inside quotagate layers, made by its
// outermost layer, whose adapter keeps its exchange in a Slot[X]: the
// request's later layers of that adapter share the Slot (see Slot); a later
// layer of another adapter gets a Slot of its own.
type Context[X any] struct {
	context.Context
	Shared
	slot Slot[X]
}

// shared is what every Context is to a layer of any adapter.
type shared interface{ shared() *Shared }

func (c *Context[X]) shared() *Shared { return &c.Shared }

// Value returns c for the package's key and defers to the parent otherwise.
func (c *Context[X]) Value(k any) any {
	if _, ok := k.(key); ok {
		return c
	}
	return c.Context.Value(k)
}

// Enter returns, for a layer whose adapter keeps its exchange in a Slot[X],
// the quotagate context and state of request r, the Slot for the layer's
// exchange, which the caller fills whole (*slot = Slot[X]{...}: it may
// hold an outer layer's values), and the request to pass on. When r's
// context carries no quotagate context, Enter creates it, fills the
// state's request view from r and reports created; the request to pass on
// is then r with the new context, else r. When the request's layers have
// all finished (a handler kept the request past its end), it returns a nil
// state: serve without limiting. Unless the state is nil, the caller must
// call sh.Leave(created) when its layer is done.
//
// Request.Value falls back to the quotagate context, the context of the
// request as the outermost layer saw it: context values that middleware
// after that layer adds are not visible to key functions. Every layer of
// a router with request-scoped values of its own (Gin's keys, Echo's
// c.Get) sets st.Request.Values to read them from its router's context,
// whichever adapter made the state.
func Enter[X any](r *http.Request) (sh *Shared, st *core.RequestState, slot *Slot[X], created bool, next *http.Request) {
	parent := r.Context()
	switch c := parent.Value(key{}).(type) {
	case *Context[X]:
		if st = c.Enter(); st == nil {
			return nil, nil, nil, false, r
		}
		return &c.Shared, st, &c.slot, false, r
	case shared:
		// A layer of another adapter made the context.
		sh = c.shared()
		if st = sh.Enter(); st == nil {
			return nil, nil, nil, false, r
		}
		return sh, st, new(Slot[X]), false, r
	}
	st = pool.Get().(*core.RequestState)
	c := &Context[X]{Context: parent}
	c.Start(st)
	st.Request = core.Request{
		Method:     r.Method,
		Path:       r.URL.Path,
		RawQuery:   r.URL.RawQuery,
		RemoteAddr: r.RemoteAddr,
		Header:     r.Header,
		Context:    c,
	}
	return &c.Shared, st, &c.slot, true, r.WithContext(c)
}

// Leave drops the caller's reference; first says the caller is the layer
// that created the context (Enter reported created), whose return hands
// the request back to the router. The last layer out returns the state to
// the pool.
func (sh *Shared) Leave(first bool) {
	if st := sh.Shared.Leave(first); st != nil {
		st.Reset()
		pool.Put(st)
	}
}

// Decision returns the decision of the request whose context is ctx, or nil
// outside a quotagate layer or once its layers have finished.
func Decision(ctx context.Context) *core.Decision {
	if c, ok := ctx.Value(key{}).(shared); ok {
		if st := c.shared().State(); st != nil {
			return &st.Decision
		}
	}
	return nil
}

// Slot is storage for a layer's core.Exchange: an adapter's exchange type
// is a Slot (type exchange reqstate.Slot[X]), so that the exchange, which
// the request sequence holds through an interface, costs no allocation. X
// is what the adapter adds to the header: its router's context or response
// writer and request, the rest of its chain, its denial handler.
//
// The request's layers of one adapter share the Context's one Slot: each
// layer fills it before its sequence starts, and its exchange reads it only
// until it calls the rest of the chain (Next copies what it needs first).
// So an inner layer, which runs inside that call, may refill it; and an
// outer layer that finishes while an inner one still runs (behind a
// timeout middleware) no longer reads it.
type Slot[X any] struct {
	Header
	// X is the adapter's own part.
	X X
}

// Header is the header-writing part of an core.Exchange for a
// response whose header is an http.Header.
type Header struct {
	H     http.Header
	C     *Shared
	First bool  // the layer created C
	n     uint8 // values used so far
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
	if h.First && int(h.n) < len(h.C.vals) {
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
