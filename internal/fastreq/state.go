package fastreq

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/valyala/fasthttp"
)

// Router is what one Fiber major gives the request sequence: how to reach
// a request's fasthttp context from its own context type C (*fiber.Ctx for
// v2, fiber.Ctx for v3), call the rest of the chain, and read what it
// reports. Each adapter declares one, as a package variable.
type Router[C any] struct {
	// RequestCtx returns the request's fasthttp context, or nil when the
	// router has released C (Fiber v2 does once the request is answered).
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
// handler of the latest layer. It is pooled; the package documentation
// gives its lifetime, which sh counts and orders (adapter.Shared, as for
// the adapters of routers built on *http.Request).
//
// A State is also the latest layer's core.Exchange: the sequence
// writes and denies before it calls Next, when no inner layer has replaced
// C and LimitReached yet, so it costs no allocation.
type State[C any] struct {
	core.RequestState
	r *Router[C]

	// sh counts the request's running layers and says whether the first
	// has returned the request to the router; its lock guards c and
	// limitReached once other layers may run.
	sh adapter.Shared[State[C]]
	// fc is the fasthttp context of the request the State serves, nil
	// while the State is in the pool: a user value that outlived its
	// request's layers is told apart by it. Read only while holding a
	// reference (sh), which keeps the State from being recycled.
	fc *fasthttp.RequestCtx
	// solo is set while the first layer runs alone, before it calls the
	// rest of the chain, where every other layer of the request runs: the
	// first layer's uses of the State need no lock then. A layer that
	// finds it set belongs to another request (it kept a context the
	// router has recycled since) and is turned away (join). Set when the
	// State is created, cleared when the rest of the chain may run.
	solo atomic.Bool
	// c and limitReached are the latest layer's.
	c            C
	limitReached func(C) error

	buf  []byte // a header field being written
	vals []byte // the header values of the latest layer
	conn Conn
}

// Serve runs layer l's sequence for the request of c; limitReached, when
// not nil, answers a denial.
//
// The first layer of a request creates its State; a later layer joins it.
// A layer that arrives after the first layer returned, while another
// layer still runs (a timeout middleware runs the rest of the chain on
// its own goroutine and answered the request), does nothing at all,
// neither limiting nor running the rest of the chain: the router has the
// request back, and the context it would pass on may serve another
// request already.
func (r *Router[C]) Serve(l *core.Layer, c C, limitReached func(C) error) error {
	fc := r.RequestCtx(c)
	if fc == nil {
		return nil // Fiber released the request: it has been answered
	}
	if st, _ := fc.UserValue(key[C]{}).(*State[C]); st != nil {
		switch st.join(fc, c, limitReached) {
		case joined:
			defer st.leave(false)
			return l.Serve(&st.RequestState, st)
		case taken:
			return nil
		}
		// The value outlived its request's layers: start afresh.
	}
	st, _ := r.pool.Get().(*State[C])
	if st == nil {
		st = &State[C]{r: r}
	}
	uri := fc.URI()
	st.Request = core.Request{
		Method:  Method(fc.Method()),
		Route:   r.Route(c),
		Header:  (*Header)(&fc.Request.Header),
		Values:  (*locals[C])(st),
		Context: r.Context(c),
	}
	st.Request.RemoteAddr, st.Request.Path, st.Request.RawQuery = st.conn.Owned(fc.RemoteAddr(), uri.Path(), uri.QueryString())
	// Unlocked: a layer reaches st only through the user value, set
	// below, or by a reference taken after Start (join).
	st.fc = fc
	st.solo.Store(true)
	st.c, st.limitReached = c, limitReached
	st.sh.Start(st)
	fc.SetUserValue(key[C]{}, st)
	defer st.leave(true)
	return l.Serve(&st.RequestState, st)
}

// What join found.
const (
	joined = iota // the layer is one of the request's running layers
	taken         // the first layer returned (the router has the request), or runs alone (the layer is another request's)
	stale         // the State no longer serves the request of fc
)

// join makes a later layer of the request of fc, with its context c and
// LimitReached handler, one of the State's running layers, if it may be,
// and then reads c's route and user context. It takes a reference first,
// so that the State cannot be recycled while it looks, and gives it back
// unless the layer joins. It reads nothing of c before it knows that the
// first layer has not returned: after that, the router may have released
// c (Fiber v2's UserContext of a released Ctx dereferences nil), and the
// first layer cannot return while join holds the lock.
func (st *State[C]) join(fc *fasthttp.RequestCtx, c C, limitReached func(C) error) int {
	if st.sh.Enter() == nil {
		return stale // every layer has left: pooled, or serving nothing
	}
	if st.fc != fc {
		st.leave(false)
		return stale
	}
	if !st.sh.Use() || st.solo.Load() {
		st.sh.Release()
		st.leave(false)
		return taken
	}
	st.c = c // a mounted app shares the request but not always the context
	st.limitReached = limitReached
	st.Request.Route = st.r.Route(c)
	st.Request.Context = st.r.Context(c)
	st.sh.Release()
	return joined
}

// leave drops a layer's reference; first says it is the layer that
// created the State, whose return hands the request back to the router.
// The last layer out returns the State to the pool. Neither touches the
// fasthttp context, which may serve another request already; the user
// value stays, for fasthttp clears it with the request, and a stale one
// is told apart by fc.
func (st *State[C]) leave(first bool) {
	if st.sh.Leave(first) == nil {
		return
	}
	st.Reset()
	var zero C
	st.c, st.limitReached, st.fc = zero, nil, nil
	st.r.pool.Put(st)
}

// use locks the State for a use of the request's response and reports
// whether the layer may make it: the first layer has not returned, and
// the request's context has not ended (see usable). The caller calls
// st.sh.Release.
func (st *State[C]) use() bool {
	return st.sh.Use() && st.usable()
}

// usable reports whether the request's context has not ended. A context
// that ended means that whoever ended it (a timeout middleware) gave up on
// the request and answers it; Fiber v3's timeout middleware copies the
// response at that moment, so a write then would race with it.
func (st *State[C]) usable() bool {
	ctx := st.Request.Context
	return ctx == nil || ctx.Err() == nil
}

// Decision returns the decision of the request of c, or nil outside a
// quotagate layer or after the request's layers finished.
func (r *Router[C]) Decision(c C) *core.Decision {
	fc := r.RequestCtx(c)
	if fc == nil {
		return nil
	}
	st, ok := fc.UserValue(key[C]{}).(*State[C])
	if !ok || st.sh.Enter() == nil {
		return nil
	}
	defer st.leave(false)
	if st.fc != fc {
		return nil
	}
	return &st.Decision
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

// lock locks the State for a use of the request's response, unless the
// first layer runs alone (it has not returned then), and reports whether
// the layer may make it (see use). The caller calls unlock.
func (st *State[C]) lock() bool {
	if st.solo.Load() {
		return st.usable()
	}
	return st.use()
}

// unlock ends what lock began.
func (st *State[C]) unlock() {
	if !st.solo.Load() {
		st.sh.Release()
	}
}

// SetHeader copies name and value into the response header.
func (st *State[C]) SetHeader(name, value string) {
	if st.lock() {
		st.buf = SetHeader(&st.fc.Response.Header, st.buf, name, value)
	}
	st.unlock()
}

// DelHeader removes name from the response header.
func (st *State[C]) DelHeader(name string) {
	if st.lock() {
		st.fc.Response.Header.Del(name)
	}
	st.unlock()
}

// Deny sets the denial's fields and answers it with the layer's
// LimitReached handler, or with its status and body. When the request's
// context has ended (the denial is a shaping wait it cut short), it
// writes nothing and returns the context's error, for whatever ended the
// context to answer; once the first layer has returned, it writes
// nothing.
func (st *State[C]) Deny(_ *core.Decision, den core.Denial) error {
	if !st.lock() {
		var err error
		if ctx := st.Request.Context; ctx != nil {
			err = ctx.Err()
		}
		st.unlock()
		return err
	}
	res := &st.fc.Response
	SetFields(&res.Header, den.Header)
	c, limitReached := st.c, st.limitReached
	if limitReached == nil {
		res.SetStatusCode(den.Status)
		res.SetBody(den.Body)
	}
	st.unlock()
	if limitReached != nil {
		// The handler is the application's: it runs unlocked, like the
		// rest of the chain (it may call DecisionFrom, or even Next, and
		// so run other layers).
		st.solo.Store(false)
		return limitReached(c)
	}
	return nil
}

// Next runs the rest of the chain, unless the first layer has returned,
// and reports the status the response got, or the one Fiber's error
// handler will give the chain's error, when asked and while the response
// is still the request's.
func (st *State[C]) Next(status bool) (int, error) {
	var (
		gone bool
		c    C
		r    = st.r
	)
	if st.solo.Load() {
		// The first layer: the router has the request until it returns,
		// and from here on other layers may run.
		c = st.c
		st.solo.Store(false)
	} else {
		gone = !st.sh.Use()
		c = st.c // inner layers replace st.c
		st.sh.Release()
	}
	if gone {
		// The router answered the request while this layer waited (a
		// shaping delay behind a timeout middleware).
		return 0, nil
	}
	err := r.Next(c)
	// Locked even when no status is asked, so that what a layer that
	// joined on another goroutine wrote to the State is visible to this
	// layer's end.
	ok := st.use()
	defer st.sh.Release()
	if err != nil {
		return r.ErrStatus(err), err
	}
	if !status || !ok {
		return 0, nil
	}
	return st.fc.Response.StatusCode(), nil
}

// locals reads Fiber locals as a core.ValueReader. String values are
// copied, since a local may hold a string borrowed from the request.
type locals[C any] State[C]

func (v *locals[C]) Value(key any) any { return Local(v.fc, key) }
