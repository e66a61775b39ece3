// Package adapter is what a router adapter is made of: the request
// sequence every quotagate middleware runs, written once, and the small
// surface a router must provide for it. Packages nethttp, ginmw, echomw
// (and echomw/echov5) and fibermw (and fibermw/fiberv3) are built on it;
// a new router's adapter is about a hundred lines on it.
//
// Users of a router that quotagate supports never need this package.
//
// # The sequence
//
// For each request, a layer's middleware:
//
//  1. skips the request when the router's own skip predicate says so
//     (the adapter checks it before anything else), or when the layer's
//     core.Skip predicate does: no store, no header fields;
//  2. asks the layer's guard (core.GuardBy), if any, for a place, then
//     decides the layer's budgets, appending to the decision that the
//     request's outer layers started ([State]);
//  3. waits for a shaping delay (LeakyBucket), refunding everything and
//     answering 503 if the request's context ends first;
//  4. writes the rate-limit header fields of every budget evaluated so
//     far, removing fields of another style that an outer layer wrote;
//  5. denies ([Exchange.Deny]) or calls the rest of the chain
//     ([Exchange.Next]);
//  6. when the request leaves the layer (after the handler, a panic, or a
//     denial), gives the guard's place back, applies core.CountWhen to the
//     response status and tells the engine's observer how the request
//     ended in this layer (a later layer's denial included).
//
// [Serve] runs steps 1 (core.Skip) to 6. The adapter keeps one [State] per
// request, shared by all of the request's layers, and gives each layer an
// [Exchange] that reads and writes the router's response.
package adapter

import (
	"context"
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/link"
)

// Exchange is the part of a router's response that the sequence uses. One
// Exchange serves one layer of one request.
type Exchange interface {
	// FieldBuffer returns an empty buffer to render the layer's header
	// values into. The values passed to SetHeader alias it (or the array
	// it grows into), so either SetHeader copies them, or the buffer must
	// not be written again while the response's header may be read.
	FieldBuffer() []byte
	// SetHeader sets the response header field name, in canonical form,
	// to the single value value (see FieldBuffer).
	SetHeader(name, value string)
	// DelHeader removes the response header field name.
	DelHeader(name string)
	// Deny answers a denied request: d is its decision, and den the layer's
	// rendering of it (its DenyFunc, or DefaultDeny), whose Header
	// fields (Retry-After, Content-Type, ...) are to be set on the
	// response; then, unless the adapter hands the denial to a handler of
	// the router's own (such a handler writes status and body itself), its
	// Status and Body. The rest of the chain must not run. The returned
	// error is what the middleware returns.
	Deny(d *core.Decision, den core.Denial) error
	// Next runs the rest of the chain. When status is true, it reports
	// the status the response got (0 when it cannot tell); otherwise it
	// may report 0. The returned error is what the middleware returns.
	Next(status bool) (int, error)
}

// State is what the layers of one request share: the router-neutral view
// of the request and the decision every layer appends to. The outermost
// layer fills Request; each layer sets Request.Route to the route it
// knows. Reset it before reusing it for another request (adapters pool
// States).
//
// The layers of a request usually run one inside the other, on one
// goroutine; behind a timeout middleware an inner layer runs on another
// goroutine, and may decide, end a shaping wait or deny while an outer
// layer ends. So [Serve] holds the State's lock while a layer reads or
// changes the decision, and not while it waits, runs the rest of the
// chain or answers a denial.
type State struct {
	// Request is the request as key, cost and quota functions see it.
	Request core.Request
	// Decision is the decision of the request's layers so far.
	Decision core.Decision

	mu    sync.Mutex // held by a layer that reads or changes Decision
	spans link.Spans // the header fields the latest layer wrote
}

// Reset clears s for another request.
func (s *State) Reset() {
	s.Decision.Reset()
	s.Request = core.Request{}
	s.spans = link.Spans{}
}

var (
	begin  = link.Begin.(func(*core.Layer, *core.Request, *core.Decision) link.Step)
	end    = link.End.(func(*core.Layer, *core.Request, *core.Decision, link.Step, int))
	render = link.Render.(func(*core.Layer, []byte, *core.Decision, *link.Spans) []byte)
	deny   = link.Deny.(func(*core.Layer, *core.Request, *core.Decision) core.Denial)
	counts = link.Counts.(func(*core.Layer) bool)
	option = link.Option.(func(key, v any) core.LayerOption)
	value  = link.Value.(func(*core.Layer, any) any)
)

// Serve runs layer l's sequence for the request whose state is st, writing
// through x, and returns what the middleware returns: the denial's error or
// the rest of the chain's.
//
// A handler that panics propagates through Serve; the layer's charges are
// kept and its observer is told as the panic passes.
func Serve(l *core.Layer, st *State, x Exchange) error {
	r, d := &st.Request, &st.Decision
	st.mu.Lock()
	locked := true
	defer func() {
		if locked { // a key, cost or quota function panicked
			st.mu.Unlock()
		}
	}()
	step := begin(l, r, d)
	if step.Skipped {
		locked = false
		st.mu.Unlock()
		_, err := x.Next(false)
		return err
	}
	if d.Allowed && d.Delay > 0 {
		ctx := r.Context
		if ctx == nil {
			ctx = context.Background()
		}
		st.mu.Unlock()
		ended := sleep(ctx, d.Delay)
		st.mu.Lock()
		if ended {
			_ = l.Wait(ctx, d) // the context has ended: d is now denied, charges refunded
		} else {
			d.Delay = 0
		}
	}
	writeFields(l, st, x)
	if !d.Allowed {
		end(l, r, d, step, 0)
		den := deny(l, r, d)
		locked = false
		st.mu.Unlock()
		return x.Deny(d, den)
	}
	locked = false
	st.mu.Unlock()
	status := 0
	defer func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		end(l, r, d, step, status)
	}()
	var err error
	status, err = x.Next(counts(l))
	return err
}

// sleep waits for delay, and reports whether ctx ended first.
func sleep(ctx context.Context, delay time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-ctx.Done():
		return true
	}
}

// writeFields writes the header fields of every budget evaluated so far,
// and removes those an outer layer wrote that this layer does not (another
// header style), so stacked layers never leave stale or mismatched fields.
func writeFields(l *core.Layer, st *State, x Exchange) {
	sp := &st.spans // in the State, which is on the heap anyway
	prev, nprev := sp.Names, sp.N
	buf := render(l, x.FieldBuffer(), &st.Decision, sp)
	for _, name := range prev[:nprev] {
		if !sp.Has(name) {
			x.DelHeader(name)
		}
	}
	for i := 0; i < sp.N; i++ {
		v := sp.Static[i]
		if v == "" && sp.End[i] > sp.Start[i] {
			v = unsafe.String(&buf[sp.Start[i]], sp.End[i]-sp.Start[i])
		}
		x.SetHeader(sp.Names[i], v)
	}
}

// Option returns a layer option that attaches v to the layer under key,
// for an adapter's own options (a router-native skip predicate or denial
// handler). Use an unexported type as key. The adapter reads it back with
// [Value] when it builds its middleware for the layer.
func Option(key, v any) core.LayerOption { return option(key, v) }

// Value returns what an [Option] attached to l under key, or nil.
func Value(l *core.Layer, key any) any { return value(l, key) }

// LimitBy returns a layer of one budget over a new in-memory store: quota
// requests per window for each key, counted with a sliding window, in a
// budget named "default", with the IETF header fields. It is what the
// adapters' one-call LimitBy functions build; opts are layer options. The
// store's sweeper runs for the life of the process.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) (*core.Layer, error) {
	if key == nil {
		return nil, errors.New("quotagate: LimitBy: no key function (use keyfunc.PeerIP() to limit by client IP)")
	}
	store, err := core.NewMemoryStore(core.MemoryConfig{})
	if err != nil {
		return nil, err
	}
	eng, err := core.New(core.Config{
		Store: store,
		Budgets: []core.Budget{{
			Name: "default", Algorithm: core.SlidingWindow,
			Quota: quota, Window: window, Key: key,
		}},
	})
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	return eng.Layer(append([]core.LayerOption{core.Use("default")}, opts...)...)
}

// MustLimitBy is LimitBy that panics on error, for the adapters' one-call
// functions, which are called at start-up.
func MustLimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) *core.Layer {
	l, err := LimitBy(quota, window, key, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// Middleware creates a layer of eng configured by opts and returns the
// router's middleware for it, made by forLayer: the body of every
// adapter's Middleware function. The error lists every configuration
// problem.
func Middleware[M any](eng *core.Engine, forLayer func(*core.Layer) M, opts ...core.LayerOption) (M, error) {
	l, err := eng.Layer(opts...)
	if err != nil {
		var zero M
		return zero, err
	}
	return forLayer(l), nil
}

// Must returns m, and panics when err is not nil: the body of every
// adapter's MustMiddleware function, called at start-up.
func Must[M any](m M, err error) M {
	if err != nil {
		panic(err)
	}
	return m
}
