package inspect

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/observe"
)

// DefaultRecentSize is how many denials and how many store errors a
// [Recent] keeps unless told otherwise.
const DefaultRecentSize = 64

// maxField bounds the strings an event keeps (paths, keys, errors).
const maxField = 256

// MaxRoutes bounds how many (budget, method, route) triples a [Recent]
// remembers.
const MaxRoutes = 1024

// Event is one recent denial or store error.
type Event struct {
	// Time is when the engine reported it (the local clock).
	Time time.Time `json:"time"`
	// Kind is "denial" for a denial, or for a store error its
	// core.ErrorKind: store_error, store_timeout, store_canceled,
	// breaker_open or store_misconfigured.
	Kind string `json:"kind"`
	// Budget is the budget that denied the request ("" for a store error).
	Budget string `json:"budget,omitempty"`
	// Reason is the decision's core.Reason, e.g. "rate_limited" (denials).
	Reason string `json:"reason,omitempty"`
	// Key is the partition key the denying budget counted the request
	// under (denials; empty when none was derived).
	Key string `json:"key,omitempty"`
	// Method and Route (the route pattern, or the path when the router
	// reports none) describe the denied request.
	Method string `json:"method,omitempty"`
	Route  string `json:"route,omitempty"`
	// RetryAfter is the denial's retry-after, in seconds.
	RetryAfter float64 `json:"retry_after_seconds,omitempty"`
	// Error is the store error's text.
	Error string `json:"error,omitempty"`
}

// Recent is a [core.Observer] that keeps the most recent denials and store
// errors in two bounded rings, and the routes that spend each budget, for
// the inspection page. Put it in the engine's Config.Observer, alone or
// with others through observe.Multi.
//
// It costs an allowed request, per layer, a lookup of its route in a map
// that is only read (no lock) and a short scan, about 20 ns, and allocates
// nothing for it; a route not seen before takes a lock and copies the map.
// A denial or a store error costs a few small allocations (the event and
// copies of its strings) and an atomic store: recording an event never
// locks, and readers ([Recent.Denials], [Recent.Errors]) never block
// writers. It is safe for concurrent use. A nil *Recent records nothing.
type Recent struct {
	denials, errors ring
	now             func() time.Time

	// routes maps a route to the (budget, method) pairs seen on it. It is
	// replaced as a whole when one is added (rare: routes are
	// configuration), so that requests only read it.
	routes   atomic.Pointer[map[string][]spend]
	routesMu sync.Mutex
	nroutes  int // guarded by routesMu
	full     atomic.Bool
}

type spend struct{ budget, method string }

type ring struct {
	slots []atomic.Pointer[Event]
	next  atomic.Uint64
}

func (r *ring) put(e *Event) {
	i := r.next.Add(1) - 1
	r.slots[i%uint64(len(r.slots))].Store(e)
}

// list returns the ring's events, newest first. An event written while
// list runs may be missed or may replace an older one; each event it
// returns is whole.
func (r *ring) list() []Event {
	n := r.next.Load()
	size := uint64(len(r.slots))
	out := make([]Event, 0, min(n, size))
	for k := uint64(0); k < size && k < n; k++ {
		if e := r.slots[(n-1-k)%size].Load(); e != nil {
			out = append(out, *e)
		}
	}
	return out
}

// NewRecent returns a Recent keeping the last size denials and the last
// size store errors (DefaultRecentSize when size <= 0).
func NewRecent(size int) *Recent {
	if size <= 0 {
		size = DefaultRecentSize
	}
	r := &Recent{
		denials: ring{slots: make([]atomic.Pointer[Event], size)},
		errors:  ring{slots: make([]atomic.Pointer[Event], size)},
		now:     time.Now,
	}
	r.routes.Store(&map[string][]spend{})
	return r
}

// Routes returns, for each budget, the routes ("METHOD /pattern") of the
// requests it evaluated, sorted: what spends the budget, as the routers
// reported their route patterns. Requests whose router reports no pattern
// are not counted, and at most MaxRoutes (budget, method, route) triples
// are kept.
func (r *Recent) Routes() map[string][]string {
	if r == nil {
		return nil
	}
	out := map[string][]string{}
	for route, spends := range *r.routes.Load() {
		for _, sp := range spends {
			out[sp.budget] = append(out[sp.budget], strings.TrimSpace(sp.method+" "+route))
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// learn remembers the route of req for each budget of layer. A known route
// costs one map lookup and a short scan, without a lock or an allocation.
func (r *Recent) learn(req *core.Request, layer []core.Result) {
	if req == nil || req.Route == "" {
		return
	}
	spends := (*r.routes.Load())[req.Route]
	for i := range layer {
		if !slices.Contains(spends, spend{layer[i].Budget, req.Method}) {
			if !r.full.Load() { // once full, unknown routes cost no lock
				r.addRoutes(req, layer)
			}
			return
		}
	}
}

func (r *Recent) addRoutes(req *core.Request, layer []core.Result) {
	r.routesMu.Lock()
	defer r.routesMu.Unlock()
	old := *r.routes.Load()
	route := req.Route
	list := old[route]
	added := false
	for i := range layer {
		sp := spend{layer[i].Budget, req.Method}
		if r.nroutes >= MaxRoutes || slices.Contains(list, sp) {
			continue
		}
		if !added {
			list = slices.Clone(list)
			route = clip(route)
			added = true
		}
		list = append(list, spend{strings.Clone(sp.budget), clip(sp.method)})
		r.nroutes++
	}
	if r.nroutes >= MaxRoutes {
		r.full.Store(true)
	}
	if !added {
		return
	}
	next := make(map[string][]spend, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[route] = list
	r.routes.Store(&next)
}

// Denials returns the recent denials, newest first.
func (r *Recent) Denials() []Event {
	if r == nil {
		return nil
	}
	return r.denials.list()
}

// Errors returns the recent store errors, newest first.
func (r *Recent) Errors() []Event {
	if r == nil {
		return nil
	}
	return r.errors.list()
}

// ObserveDecision implements [core.Observer]: it remembers which routes
// spend which budgets, and records a denial once, in the layer that denied
// the request.
func (r *Recent) ObserveDecision(req *core.Request, d *core.Decision, layer []core.Result, _ time.Duration) {
	if r == nil {
		return
	}
	r.learn(req, layer)
	if d.Allowed || !observe.LayerDenied(d, layer) {
		return
	}
	e := &Event{
		Time:       r.now(),
		Kind:       "denial",
		Budget:     clip(d.DeniedBy),
		Reason:     d.Reason.String(),
		RetryAfter: d.RetryAfter.Seconds(),
	}
	for i := range layer {
		if layer[i].Budget == d.DeniedBy {
			e.Key = clip(layer[i].Key)
			break
		}
	}
	if req != nil {
		e.Method = clip(req.Method)
		e.Route = req.Route
		if e.Route == "" {
			e.Route = req.Path
		}
		e.Route = clip(e.Route)
	}
	r.denials.put(e)
}

// ObserveError implements [core.Observer]: it records store errors (and
// calls skipped by the open breaker); errors of one budget's key, cost or
// quota functions are left to other observers.
func (r *Recent) ObserveError(kind core.ErrorKind, _ string, err error) {
	if r == nil || !kind.IsStore() {
		return
	}
	r.errors.put(&Event{Time: r.now(), Kind: kind.String(), Error: clip(err.Error())})
}

// clip copies s, at most maxField bytes of it: request strings may be
// borrowed from the router (Fiber's are) and must not be kept as they are.
func clip(s string) string {
	if len(s) > maxField {
		s = s[:maxField]
	}
	return strings.Clone(s)
}
