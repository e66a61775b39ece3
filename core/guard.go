package core

import "time"

// A Guard admits or sheds requests in front of a layer's budgets from
// state kept in the process, such as a concurrency limit that adapts to
// load (package core/adaptive). Attach one to a layer with [GuardBy].
//
// A layer asks its guard before it evaluates any budget, so a shed request
// costs no store call. Every request the guard admits is released exactly
// once, when it leaves the layer: after the handler returns (or panics),
// or at once when the layer's budgets or a later layer deny it. A request
// the layer skips ([Skip]) or that an earlier layer denied never reaches
// the guard. Implementations must be safe for concurrent use and quick:
// both methods run on every request.
type Guard interface {
	// Admit reports whether r may enter the layer now, and describes the
	// guard's state in s whether it does or not (s is the Decision's
	// Guard field). A request Admit refuses is denied with
	// [ReasonOverloaded], d.DeniedBy set to s.Name and d.RetryAfter to
	// s.RetryAfter. timed asks for the latency of an admitted request:
	// the layer reads the clock on entry and on exit only then, since a
	// clock read can cost more than the rest of a guard.
	Admit(r *Request, s *GuardState) (ok, timed bool)
	// Release gives back the place of a request Admit admitted. served
	// reports whether the request reached the handler; it is false when a
	// budget of the layer or a later layer denied it, and then latency says
	// nothing about the load. latency, for a request Admit asked to time,
	// is the time from Admit to the request leaving the layer: the
	// handler's time, plus the layer's own store call and any shaping
	// wait; it is 0 otherwise. status is the response status: a layer
	// with a guard asks its adapter for it (as [CountWhen] does), so it is
	// 0 only when the router cannot tell or the handler panicked (a
	// handler that panics is released served, with status 0). A panic in
	// Release goes on up the request once its layer has given back its
	// concurrency slots and the other guards' places.
	Release(served bool, latency time.Duration, status int)
}

// GuardState is what a [Guard] reports about one request: the state of its
// limit when the request arrived. It is the Decision's Guard field, for
// headers, logs and denial bodies; with stacked guarded layers it is the
// latest guard's.
type GuardState struct {
	// Name names the guard, e.g. "adaptive"; it is the Decision's
	// DeniedBy when the guard sheds the request.
	Name string
	// Limit is the guard's concurrency limit in force for the request's
	// priority.
	Limit int64
	// InFlight is the number of requests inside the guard, this one
	// included when it was admitted.
	InFlight int64
	// Shed is how many requests the guard has shed since it was created.
	Shed int64
	// Signal is the load signal the guard last acted on; the guard's
	// documentation says what it measures.
	Signal float64
	// Priority is the request's priority as the guard classified it.
	Priority int
	// RetryAfter is the guard's hint, for a shed request, of when to try
	// again.
	RetryAfter time.Duration
}

// GuardBy puts g in front of the layer's budgets: it sheds requests
// before any budget is evaluated (see [Guard]). A layer with a guard may
// use no budget at all. The router adapters give the guard's place back
// when the handler returns; after [Layer.Decide], call [Decision.Done].
func GuardBy(g Guard) LayerOption {
	return func(c *layerConfig) { c.guard = g }
}

// admit asks the layer's guard to let r in. It returns the admission
// (Guarded, and Entered when the guard times the request) or, with shed
// true, the step of a request the guard shed.
func (l *Layer) admit(r *Request, d *Decision) (st step, shed bool) {
	ok, timed := l.guard.Admit(r, &d.Guard)
	if !ok {
		d.Allowed, d.Reason, d.DeniedBy = false, ReasonOverloaded, d.Guard.Name
		d.RetryAfter, d.Delay = d.Guard.RetryAfter, 0
		// Earlier layers' charges are refunded; this layer charged nothing.
		return l.decided(r, d, step{Start: len(d.Results), End: len(d.Results)}), true
	}
	st.Guarded = true
	if timed {
		st.Entered = monotonic()
	}
	d.admitted = l // until the evaluation returns
	return st, false
}

// release gives back the guard's place of a request the step admitted.
func (l *Layer) release(d *Decision, st step, status int) {
	if st.Guarded {
		l.guard.Release(d.Allowed, since(st.Entered), status)
	}
}

// since is the latency of a request timed from entered, or 0 when it was
// not timed (entered is 0).
func since(entered time.Duration) time.Duration {
	if entered == 0 {
		return 0
	}
	return max(monotonic()-entered, 1)
}

// held is a guard's place taken by a direct call of Layer.Decide.
type held struct {
	l       *Layer
	entered time.Duration
}

// hold records, after a direct call of Decide, a place the layer's guard
// admitted, for Done to give back; a place of a request the layer denied
// is given back at once.
func (l *Layer) hold(d *Decision, st step) {
	if !st.Guarded {
		return
	}
	if !d.Allowed {
		l.release(d, st, 0)
		return
	}
	d.held = append(d.held, held{l: l, entered: st.Entered})
}
