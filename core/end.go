package core

import "context"

// This file is the end of a layer's part of a request (step 6 of
// [Layer.Serve]): when the request leaves the layer, its guard's place,
// CountWhen, the observer, and its concurrency slots. A direct caller of
// [Layer.Decide] ends with [Decision.Done] (decision.go).

// end finishes the layer's sequence once the handler answered with status
// (0 when the adapter does not know it): it releases the guard's place,
// applies CountWhen, tells the observer about a decision it was not told
// about yet, and gives back the layer's concurrency slots. The steps after
// the guard's are deferred, so that a panic in code of the user's (a
// guard's Release, an adaptive limiter's Signal, CountWhen, the observer)
// loses no slot and skips no later step: the panic goes on up once they
// are done.
func (l *Layer) end(r *Request, d *Decision, st step, status int) {
	if l.calls || st.Slots { // else there is nothing to do
		l.finish(r, d, st, status)
	}
}

// finish is end for a layer that calls code of the user's or holds slots.
func (l *Layer) finish(r *Request, d *Decision, st step, status int) {
	if !l.calls {
		l.freeSlots(r, d, st) // no code of the user's runs: no defer to pay for
		return
	}
	defer l.freeSlots(r, d, st)
	defer l.settle(r, d, st, status)
	l.release(d, st, status)
}

// settle applies CountWhen and tells the observer about a decision it was
// not told about yet.
func (l *Layer) settle(r *Request, d *Decision, st step, status int) {
	if !st.Observed && (d.Allowed || st.End > st.Start) {
		// A layer that evaluated nothing has nothing to report about a
		// denial made elsewhere.
		defer l.observe(r, d, st)
	}
	if l.count != nil && d.Allowed && status != 0 && !l.count(status) && st.End <= len(d.Results) {
		refundResults(context.WithoutCancel(r.ctx()), d.Results[st.Start:st.End])
	}
}

// freeSlots gives back the layer's concurrency slots once the request has
// left it (after the observer saw the decision as it was taken). Only a
// layer that took slots reads d.Results here, so a layer without any does
// not touch a decision that a handler kept running past the layer
// (http.TimeoutHandler between layers) may still be changing.
func (l *Layer) freeSlots(r *Request, d *Decision, st step) {
	if st.Slots && st.End <= len(d.Results) {
		d.releaseSlots(r.ctx(), d.Results[st.Start:st.End])
	}
}
