package core

import (
	"context"
	"sync"
)

// This file is the request sequence every router adapter runs
// ([Layer.Serve]), and the small surface a router provides for it
// ([Exchange]). Users of a router that quotagate supports never need it;
// package core/adapter says how to write an adapter for another one.
// Serve's steps follow, in the order a request meets them, in decide.go
// (with the store call in storecall.go), headers.go, end.go and denial.go.

// Exchange is the part of a router's response that [Layer.Serve] uses.
// One Exchange serves one layer of one request.
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
	Deny(d *Decision, den Denial) error
	// Next runs the rest of the chain. When status is true, it reports
	// the status the response got (0 when it cannot tell); otherwise it
	// may report 0. The returned error is what the middleware returns.
	Next(status bool) (int, error)
}

// RequestState is what the layers of one request share: the
// router-neutral view of the request and the decision every layer appends
// to. The outermost layer fills Request; each layer sets Request.Route to
// the route it knows. Reset it before reusing it for another request
// (adapters pool them), and never while a layer of its request may still
// run (see package core/adapter on timeout middleware).
//
// The layers of a request usually run one inside the other, on one
// goroutine; behind a timeout middleware an inner layer runs on another
// goroutine, and may decide, end a shaping wait or deny while an outer
// layer ends. So [Layer.Serve] holds the state's lock while a layer reads
// or changes the decision, and not while it waits, runs the rest of the
// chain or answers a denial.
type RequestState struct {
	// Request is the request as key, cost and quota functions see it.
	Request Request
	// Decision is the decision of the request's layers so far.
	Decision Decision

	mu     sync.Mutex // held by a layer that reads or changes Decision
	fields fieldSpans // the header fields the latest layer wrote
}

// Reset clears s for another request.
func (s *RequestState) Reset() {
	s.Decision.Reset()
	s.Request = Request{}
	s.fields = fieldSpans{}
}

// Serve runs the layer's sequence for the request whose state is st,
// writing through x, and returns what the middleware returns: the
// denial's error or the rest of the chain's. For each request, it:
//
//  1. skips the request when the layer's [Skip] predicate says so: no
//     store, no header fields (an adapter checks its router's own skip
//     predicate before calling Serve);
//  2. asks the layer's guard ([GuardBy]), if any, for a place, then
//     decides the layer's budgets, appending to the decision that the
//     request's outer layers started;
//  3. waits for a shaping delay (LeakyBucket), refunding everything and
//     denying if the request's context ends first;
//  4. writes the rate-limit header fields of every budget evaluated so
//     far, removing fields of another style that an outer layer wrote;
//  5. denies ([Exchange.Deny]) or calls the rest of the chain
//     ([Exchange.Next]);
//  6. when the request leaves the layer (after the handler, a panic, or a
//     denial), gives the guard's place back, applies [CountWhen] to the
//     response status and tells the engine's observer how the request
//     ended in this layer (a later layer's denial included).
//
// A handler that panics propagates through Serve; the layer's charges are
// kept and its observer is told as the panic passes.
func (l *Layer) Serve(st *RequestState, x Exchange) error {
	r, d := &st.Request, &st.Decision
	st.mu.Lock()
	locked := true
	defer func() {
		if locked { // a key, cost or quota function panicked
			d.abandonAdmission()
			st.mu.Unlock()
		}
	}()
	step := l.begin(r, d)
	d.admitted = nil
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
		err := sleep(ctx, d.Delay)
		st.mu.Lock()
		if err != nil {
			abandon(ctx, d, err) // charges refunded, d denied
		} else {
			d.Delay = 0
		}
	}
	l.writeFields(st, x)
	if !d.Allowed {
		l.end(r, d, step, 0)
		den := l.denial(r, d)
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
		l.end(r, d, step, status)
	}()
	var err error
	status, err = x.Next(l.count != nil || l.guard != nil)
	return err
}
