// Package reqstate is the per-request state that quotagate's adapters for
// routers built on *http.Request (nethttp, ginmw, echomw) share between the
// stacked layers of one request.
//
// The outermost layer creates a Context, a small allocation that becomes the
// request's context and carries a pooled State (the core.Request view and
// the core.Decision every layer appends to). Every layer holds a reference
// while it runs; the last one out returns the State to the pool. So a layer
// that keeps running after the outer one returned (behind a timeout
// middleware that serves the rest of the chain on another goroutine) never
// works on recycled state.
package reqstate

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/quotagate/quotagate/core"
)

type key struct{}

// State is what the layers of one request share.
type State struct {
	// Req is the router-neutral view of the request.
	Req core.Request
	// D is the decision every layer appends to.
	D core.Decision
	// Owner is the router's own request context (*gin.Context,
	// echo.Context), for the adapter's value reader; nil for net/http.
	Owner any
}

var pool = sync.Pool{New: func() any { return new(State) }}

// Context is a request's context inside quotagate layers.
type Context struct {
	context.Context
	refs atomic.Int32
	// The fields the latest layer wrote: n of them, named by their index
	// in fieldNames.
	n     uint8
	names [3]uint8
	state atomic.Pointer[State]
	// The header values written for the request: the response header map
	// references them, so they live here, outside the pooled State. The
	// first layer renders them into buf, which is written once and never
	// again, so the values can alias it.
	vals [3]string
	buf  [fieldBuf]byte
}

// fieldNames are the names of every field core renders; a Context records
// the fields it wrote by their index here.
var fieldNames = [...]string{
	core.HeaderPolicy, core.HeaderRateLimit,
	core.HeaderLimit, core.HeaderRemaining, core.HeaderReset,
	core.HeaderXLimit, core.HeaderXRemaining, core.HeaderXReset,
}

// fieldIndex returns name's index in fieldNames, or len(fieldNames) for a
// name it does not know.
func fieldIndex(name string) uint8 {
	for i, n := range fieldNames {
		if n == name {
			return uint8(i)
		}
	}
	return uint8(len(fieldNames))
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
		for {
			n := c.refs.Load()
			if n <= 0 {
				return c, nil, false
			}
			if c.refs.CompareAndSwap(n, n+1) {
				return c, c.state.Load(), false
			}
		}
	}
	st = pool.Get().(*State)
	c = &Context{Context: parent}
	c.refs.Store(1)
	c.state.Store(st)
	return c, st, true
}

// Leave drops the caller's reference; the last layer out returns the State
// to the pool.
func (c *Context) Leave() {
	if c.refs.Add(-1) != 0 {
		return
	}
	st := c.state.Swap(nil)
	st.D.Reset()
	st.Req = core.Request{}
	st.Owner = nil
	pool.Put(st)
}

// Decision returns the decision of the request whose context is ctx, or nil
// outside a quotagate layer or once its layers have finished.
func Decision(ctx context.Context) *core.Decision {
	if c, ok := ctx.Value(key{}).(*Context); ok {
		if st := c.state.Load(); st != nil {
			return &st.D
		}
	}
	return nil
}

// SetFields writes the header fields layer l renders for d into h. The
// values alias the buffer they were rendered into, which is never written
// again: for the layer that created the state (first), the Context's own
// array, so it writes without allocating; for a later layer, a buffer of
// its own, because it may write another header map (a timeout middleware
// gives the rest of the chain its own) while the first one's is still
// read. Fields an earlier layer wrote that this layer does not (another
// header style) are removed, so stacked layers never leave stale or
// mismatched fields.
func (c *Context) SetFields(h http.Header, l *core.Layer, d *core.Decision, first bool) {
	var sp core.FieldSpans
	var buf []byte
	vals := c.vals[:]
	if first {
		buf = l.AppendFields(c.buf[:0:len(c.buf)], d, &sp)
	} else {
		buf = l.AppendFields(make([]byte, 0, 2*fieldBuf), d, &sp)
		vals = make([]string, sp.Len())
	}
	for i := 0; i < int(c.n); i++ {
		if x := c.names[i]; int(x) < len(fieldNames) && !sp.Has(fieldNames[x]) {
			delete(h, fieldNames[x])
		}
	}
	c.n = uint8(sp.Len())
	for i := 0; i < sp.Len(); i++ {
		name, text, value := sp.Field(i, buf)
		c.names[i] = fieldIndex(name)
		vals[i] = text
		if text == "" {
			vals[i] = unsafe.String(unsafe.SliceData(value), len(value))
		}
		h[name] = vals[i : i+1 : i+1]
	}
}
