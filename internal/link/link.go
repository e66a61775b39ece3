// Package link connects package core to package core/adapter, the home of
// the request sequence every router adapter runs, without exporting from
// core what only adapters need.
//
// Package core sets the variables in its init function; core/adapter
// asserts them to their types once, at its own initialisation (core is
// always initialised first, since core/adapter imports it). Each variable's
// comment gives the type it holds. The variables are typed any because
// this package cannot import core (core imports it).
package link

import "time"

// Spans locates the header fields a layer rendered into a buffer: field i
// is called Names[i], and its value is Static[i] when that is not empty (a
// value that is the same for every request, not copied), else
// buf[Start[i]:End[i]].
type Spans struct {
	N          int
	Names      [3]string
	Start, End [3]int
	Static     [3]string
}

// Has reports whether one of the fields is called name.
func (s *Spans) Has(name string) bool {
	for i := 0; i < s.N; i++ {
		if s.Names[i] == name {
			return true
		}
	}
	return false
}

// Step is what one layer's decision left for the rest of its sequence: the
// layer's results are d.Results[Start:End], the store call took Latency,
// and Observed says whether the observer was told already (a denial is
// final at once; an allowed decision is observed when the request leaves
// the layer).
type Step struct {
	Start, End int
	Latency    time.Duration
	// Entered is when the layer's guard admitted the request (core's
	// monotonic clock), or 0 when the guard did not ask for the request's
	// latency.
	Entered  time.Duration
	Observed bool
	// Skipped reports that the layer's core.Skip predicate passed the
	// request through: nothing was decided, nothing is to be written.
	Skipped bool
	// Guarded reports that the layer's guard admitted the request; the
	// layer's end releases it.
	Guarded bool
	// Slots reports that the layer's decision took concurrency slots,
	// which End gives back.
	Slots bool
}

// Set by package core.
var (
	// Begin decides a layer without telling the observer about an allowed
	// decision: func(*core.Layer, *core.Request, *core.Decision) Step.
	Begin any
	// End finishes a layer's sequence after the handler answered with
	// status (0 when unknown): it refunds the layer's charges when its
	// CountWhen predicate rejects status, then tells the observer, unless
	// step.Observed: func(*core.Layer, *core.Request, *core.Decision, Step, int).
	End any
	// Render appends the values of the layer's header fields for d to dst:
	// func(*core.Layer, []byte, *core.Decision, *Spans) []byte.
	Render any
	// Deny renders the layer's denial of d:
	// func(*core.Layer, *core.Request, *core.Decision) core.Denial.
	Deny any
	// Counts reports whether the layer has a CountWhen predicate (so the
	// adapter must learn the response status): func(*core.Layer) bool.
	Counts any
	// Option returns a core.LayerOption attaching v under key to a layer:
	// func(key, v any) core.LayerOption.
	Option any
	// Value returns what Option attached under key, or nil:
	// func(*core.Layer, any) any.
	Value any
)
