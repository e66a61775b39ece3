// Package adaptive is a concurrency limit that adapts to load: it caps the
// requests in flight in one process, and a controller moves the cap with
// the latency of the requests it lets through, or with a load signal the
// application supplies. When the cap is reached it sheds requests, lowest
// priority first, and the layer answers 503 with Retry-After.
//
// A [Limiter] is a [core.Guard]; put it in front of a layer with
// core.GuardBy:
//
//	lim := adaptive.MustNew(adaptive.Config{Initial: 50, Min: 5, Max: 500})
//	mw := nethttp.MustMiddleware(eng, core.Use("per_ip"), core.GuardBy(lim))
//
// # The controller
//
// The limit starts at Initial and is updated once per batch of latency
// samples. A sample is the latency of a request that reached the handler
// and was not answered with an error: requests a budget or a later layer
// denied are not samples, nor are those answered with a status of 500 or
// more, or 1xx (an upgraded connection's lifetime says nothing about the
// load). One request in SampleEvery, chosen at random, is timed, because
// reading the clock twice costs more than the rest of the limiter (every
// request is, until the first update and where requests take a
// millisecond or more: see below).
//
// An update's measure of latency is the batch's latency-weighted mean,
// Σx² / Σx over the samples x: each sample weighs as much as its latency,
// as its request held a place in the limit for that long. It is the mean
// latency of the requests found in flight at a random moment, which are
// what the limit counts. A thousand requests of a microsecond weigh what
// one of a millisecond does, so requests that cost the handler nothing (a
// 404, a trivial route, a fast error) barely move it, however many there
// are.
//
// A batch is ready for an update when it holds all of:
//
//   - Samples samples, and Samples × the no-load latency of latency in
//     all: fast requests alone take as long to fill a batch as they take
//     to add up to that, so they cannot make updates happen;
//   - samples that account for the requests in flight: by Little's law,
//     those in flight while the samples left number about SampleEvery ×
//     Σx / the batch's duration. While they outnumber 1 + twice that,
//     requests are in flight that the batch has not seen (a burst of fast
//     requests left around slow ones), and the batch waits for them;
//   - enough samples to carry the weighted mean: with many fast samples
//     and a few slow ones, the slow ones make it. The batch waits until
//     the samples that carry Σx² are worth Samples / 2 (their effective
//     number, (Σx²)² / Σx⁴; a batch of equal samples counts them all).
//
// A batch of 8 × Samples samples needs only the first condition, so that
// neither one slow request nor requests in flight that are not samples
// (slow errors) hold the controller up for long; but a few samples may
// carry its mean, so it does not count as ready below.
//
// From the batch's mean and the no-load latency, an update computes a
// gradient
//
//	gradient = clamp(Tolerance × noLoad / mean, 0.5, 2)
//
// and sets the limit to limit × gradient, within [Min, Max]; a gradient
// below 1 goes only Smoothing of the way, so that one noisy update cannot
// halve the limit. A gradient below 1 lowers the limit only if the
// samples found, on average, at least Tolerance − 1 other requests in
// flight as they left: waiting behind the requests the limit let in adds
// at most that many × the no-load latency, so with fewer the latency rose
// for another reason (on requests of microseconds, the scheduler's
// hiccups), and a lower limit would not bring it down. A gradient above 1 (the mean is within Tolerance × the
// no-load latency) raises the limit only if the limit was in use since the
// last update: a request found at least half of what its priority may use
// taken, itself included, or was shed. A limit the traffic does not use is
// not raised; traffic of any one priority can raise it, and at small limits
// (a share of 1) every request uses it. Nor does an update raise the limit
// by the gradient right after one that raised it: that batch left mostly
// under the old limit, and two rises before the first shows compound
// (only a full limit doubles again; see Starting anywhere).
//
// With a handler that serves C requests at once and queues the rest, the
// mean latency with L requests in flight is noLoad × L / C once L exceeds
// C, so the gradient is Tolerance × C / L and the limit settles at
// Tolerance × C: requests wait in the queue about (Tolerance − 1) × the
// service time, and the handler is never short of work. Below C, latency
// stays near noLoad and the limit grows by a factor of up to Tolerance
// per update (doubling, until the first update that lowers it: see
// Starting anywhere).
//
// This is the gradient controller of Netflix's concurrency-limits
// (Gradient2) and Envoy's adaptive concurrency filter, with three
// changes: the latency is weighted, the no-load latency is the lowest
// mean seen (confirmed as below), not a long-term average (which follows
// the latency upwards under sustained overload), and the gradient may
// exceed 1, so the limit approaches its level from below as from above
// instead of adding a √limit headroom that makes it oscillate above it.
//
// The first update takes the latency it measures as the no-load latency.
// The next two take the larger of the first two means, then the median
// of the first three, so that one low first batch does not decide it.
// After that the no-load latency goes down only to the median of the
// latest three updates' means, so one batch cannot drag it down, or to
// what a probe measures (below); and it is learnt again in the same way,
// replacing the old one:
//
//   - when the limit has fallen to Min: latency measured with so few
//     requests in flight is the no-load latency by definition. A handler
//     that became slower for good (a slower dependency) is thus learnt
//     again after the limit has dropped to Min;
//   - when two ready batches in a row measure a mean that queueing cannot
//     explain, above 2.5 × limit × noLoad: with L requests in flight, a
//     request waits for at most L − 1 others, even on a handler that
//     serves one at a time, and the factor leaves room for a limit
//     lowered while the samples were in flight. The traffic changed (slow
//     requests after a spell of fast ones only, such as a storm of errors
//     on a layer that reports no statuses) or the handler became much
//     slower. The first such update holds the limit; the second learns
//     the lower of the two means.
//
// A batch also spans about one latency: its samples stand for at least
// as many requests as were in flight as they left (by Little's law, that
// many leave in one latency). The latency of a limit shows only in
// requests admitted under it, which leave one latency later: a handler
// that serves hundreds at once fills Samples samples many times a
// latency, and updates that often would act on what the last ones have
// not yet done, swinging the limit between its bounds.
//
// Requests whose no-load latency is a millisecond or more are all timed,
// whatever SampleEvery says: next to them two clock reads cost nothing,
// and where few requests are in flight (a slow handler, a small limit)
// updates come SampleEvery times sooner. Until the first update every
// request is timed, and the first batch holds SampleEvery × Samples of
// them, or Samples if they found the limit full: from a limit of 1 on a
// handler of 200ms, 40 requests would take 8s.
//
// # Starting anywhere
//
// Initial need not be known, and the default of 4 suits handlers that
// serve 4 or more at once. From a start below the handler's capacity the
// first updates measure the no-load latency itself, and the limit
// doubles at each update that finds it full (the requests in flight at
// 95% of it or more) with the latency within half the tolerance of the
// no-load latency, until the first update that lowers it; a limit only
// partly filled rises by the gradient, at most Tolerance per update. So
// the start overshoots the capacity at most twofold.
//
// A start above the capacity makes the first updates learn a queue's
// latency as the no-load latency, and the gradient then keeps the limit
// where latency is Tolerance × that queue's: too high. Probes undo it.
// Only an update that finds the limit full may be replaced by a probe:
// the requests in flight at 95% of it or more, on average (while the
// limit rises from its start, the first such update; after the first
// update that lowers the limit, one now and then), or, in two updates
// in a row, requests shed with all of it in use and the latency above
// Tolerance × the no-load latency (a queue building, or a limit falling
// towards a level that a queue's latency set), unless the last probe
// found nothing (as at the limit's level).
//
// A limit the traffic does not fill is probed only for a closed loop:
// clients that each wait for their answer before they send again, fewer
// than the limit, keep as many requests in flight whatever the handler's
// queue, so nothing is shed and the first updates learn the handler's
// queue as the no-load latency. The most requests in flight as a sample
// left is then the number of clients, batch after batch, where under
// Poisson arrivals it varies. Once the no-load latency has settled (three
// updates), an update whose batch saw the same most in flight as the two
// before it, four or more and below the limit, with none shed, is
// replaced by a probe below that many, and when the probes find a queue
// the limit is set from it rather than from the limit. Such a probe runs
// again only after the no-load latency has risen by 10% since the last:
// a closed loop below the handler's capacity pays one probe, about one
// latency and one batch with a third of its requests shed.
//
// A probe lowers the limit for one batch to 1/Tolerance² of the requests
// in flight (at most 0.8 of them; at least Min, and only if that takes
// two or more out), and the batch holds only requests admitted under the
// probe's limit (those in flight when it began are not samples, nor are
// the probe's own in the batch after it): Samples or the probe's limit,
// whichever is more, adding up to as many no-load latencies, and carried
// by enough of them (requests faster than the guarded work, beside it,
// do not make a probe's batch). If the probe's latency is 10% or more
// below the no-load latency, or fell by at least three quarters of the
// share by which the requests in flight fell (they were queueing at both
// levels), the requests were queueing: the probe's latency, if lower,
// becomes the no-load latency. If it was 10% or more below it, or fell
// as steeply as the requests in flight (the latency is proportional to
// them: a queue at both levels), the handler's capacity may be below the
// probe too, and another probe runs at once below this one, and so on
// down: a start at 4 × the capacity finds it in two or three probes.
// When the probes stop finding a queue, the limit is set to limit ×
// Tolerance × the lowest latency they found / the mean before the first;
// the next probe comes two lengths of them later. A probe whose own
// latency is above Tolerance × the no-load latency ran above the level
// and tells nothing yet: the next comes as soon, once the gradient has
// lowered the limit. At the limit's level, Tolerance ×
// the capacity, a probe runs just below the capacity, its latency is the
// no-load latency and fell by 1 − 1/Tolerance (a fifth, against the
// requests' 36%): nothing is learnt, and the wait before the next probe
// grows fourfold each time, to 64 probes' lengths. A probe costs the
// requests it sheds: at the level, for about one latency and one batch,
// the handler serves 1/Tolerance of its capacity, which at the longest
// wait is under half a percent of its work.
//
// # What the traffic can do to it
//
// Requests the handler answers fast cannot steer the limit, whatever
// their number or status: next to the guarded work they weigh nothing in
// the mean, fill no batch on their own, and a burst of them is not a
// batch while slow requests are in flight. Errors that the layer reports
// are not samples at all. Alone, as when the guarded work is idle, fast requests fill a
// batch only after adding up to Samples × the no-load latency; if they
// teach the limiter a lower no-load latency, the work's latency on its
// return cannot be queueing, and two updates learn it again.
//
// The statuses come from the layer: a layer with a guard asks the router
// adapter for the response status of every request, and
// [core.Decision.Done] passes the one it is given. Such a layer reports a
// status for every request but one whose handler panicked, which it
// releases with 0: once the limiter has seen a status, a release with 0
// is a panic, and not a sample. Where no status is known (a router that
// cannot tell), every request is released with 0, and each is a sample;
// a fast one weighs little.
//
// Slow requests do move it: a request of 30 s weighs as much as 600 of
// 50 ms. A batch that holds one waits for 8 × Samples samples, and its
// high mean lowers the limit or, above what queueing explains, holds it.
// Bound the time a request may take (http.Server's timeouts,
// http.TimeoutHandler) where clients control it, as with slow uploads.
//
// With Config.Signal set, the controller follows that signal instead of
// latency: gradient = clamp(Target / signal, 0.5, 2), read once per update
// (every Samples requests that reached the handler, whatever their
// status); no request is timed. Use it for CPU use, the depth of a work
// queue or the health of a downstream.
//
// # Priorities
//
// Config.Priority classifies each request: [Critical] requests may use the
// whole limit, [Normal] ones NormalShare of it (default 90%) and
// [Sheddable] ones SheddableShare (default 50%), rounded down but at least
// one. As load grows, sheddable requests are shed first, then normal ones,
// and critical ones last, as in Stripe's load shedders. Without a Priority
// function every request is Critical.
//
// # What a shed request gets
//
// The layer denies it with core.ReasonOverloaded; core.DefaultDeny answers
// 503, Retry-After and an RFC 9457 body of type temporary-reduced-capacity
// saying the server is overloaded. Retry-After is twice the last update's
// latency-weighted mean, at least 1 s (header values are whole
// seconds) and at most MaxRetryAfter: by then the requests that filled
// the limit have left. No budget was spent, so the RateLimit fields carry
// only the budgets of the layers the request went through, and their
// charges are refunded; the adaptive limit is the server's state, not a
// quota of the client's, and has no RateLimit member.
//
// # Observing it
//
// The Decision's Guard field ([core.GuardState]) carries the limit for the
// request's priority, the requests in flight, the total shed and the
// signal: the ratio of the last update's latency-weighted mean to the
// no-load latency (1 unloaded), or the supplied signal's last value. [Limiter.Stats] returns
// the same for the whole limiter; core/metrics (WatchAdaptive) exports it.
//
// The limit is per process: N instances behind a load balancer each
// learn their own.
package adaptive

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Priority says which requests are shed first: the higher, the sooner.
type Priority int

const (
	// Critical requests may use the whole limit.
	Critical Priority = iota
	// Normal requests may use Config.NormalShare of the limit.
	Normal
	// Sheddable requests may use Config.SheddableShare of the limit.
	Sheddable

	numPriorities = 3
)

var priorityNames = [numPriorities]string{"critical", "normal", "sheddable"}

// String returns the priority's name: "critical", "normal" or "sheddable".
func (p Priority) String() string {
	if p >= 0 && p < numPriorities {
		return priorityNames[p]
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

// ParsePriority returns the priority named s ("critical", "normal" or
// "sheddable").
func ParsePriority(s string) (Priority, error) {
	for i, n := range priorityNames {
		if n == s {
			return Priority(i), nil
		}
	}
	return 0, fmt.Errorf("quotagate: adaptive: unknown priority %q (critical, normal or sheddable)", s)
}

// Config configures a [Limiter]. The zero value is usable: every field
// has a default.
type Config struct {
	// Name names the limit in decisions (GuardState.Name, Decision.DeniedBy
	// of a shed request). Default "adaptive".
	Name string
	// Initial is the limit before the first update. Default 4, within
	// [Min, Max]. The controller finds the handler's level from any start
	// (see Starting anywhere in the package documentation): from below,
	// the limit doubles per update; from above, probes below the limit,
	// or below the requests in flight of a closed loop that does not
	// fill it, find the no-load latency.
	Initial int64
	// Min is the lowest the limit goes. Default 1.
	Min int64
	// Max is the highest the limit goes. Default 1000.
	Max int64
	// Tolerance is how many times the no-load latency the mean latency may
	// reach before the limit is lowered. Default 1.25 (as Envoy's 25%
	// buffer); at least 1.
	Tolerance float64
	// Smoothing is the share of the way from the limit to limit × gradient
	// that one update goes when it lowers the limit. Default 0.5; in
	// (0, 1].
	Smoothing float64
	// Samples is how many samples make one update: timed requests, or
	// with a Signal, requests that reached the handler. An update may
	// wait for more (see the package documentation). Default 10.
	Samples int64
	// SampleEvery says how many requests share one timed request (chosen
	// at random): 1 times every request. Default 4. It applies while the
	// no-load latency is under a millisecond; slower requests are all
	// timed.
	SampleEvery int
	// Signal, if set, is the load signal the controller follows instead of
	// latency: a value that grows with load (CPU use, a queue's depth),
	// read once per update, on the goroutine of a request leaving. It must
	// be quick and safe for concurrent use. A value below Target lets the
	// limit grow (at most doubling per update); 0, a negative value or NaN
	// reads as no load. A panic goes on up the leaving request (its layer
	// still gives back its slots), and the next batch updates again.
	Signal func() float64
	// Target is the value of Signal the controller keeps the load at.
	// Required, and positive, with Signal.
	Target float64
	// Priority classifies a request; nil makes every request Critical. It
	// runs on every request: it must be quick and safe for concurrent use.
	// A value outside Critical..Sheddable counts as Sheddable.
	Priority func(r *core.Request) Priority
	// NormalShare is the share of the limit Normal requests may use.
	// Default 0.9; in (0, 1].
	NormalShare float64
	// SheddableShare is the share of the limit Sheddable requests may
	// use. Default 0.5; in (0, NormalShare].
	SheddableShare float64
	// MaxRetryAfter caps the Retry-After of a shed request. Default 10s;
	// at least 1s.
	MaxRetryAfter time.Duration
}

// Limiter is an adaptive concurrency limit, a [core.Guard]. It is safe for
// concurrent use. Create it once, with [New], and give it to one layer
// (two layers sharing a Limiter share its limit and count each request
// they both guard twice).
type Limiter struct {
	name      string
	priority  func(*core.Request) Priority
	signal    func() float64
	target    float64
	samples   int64
	every     uint32 // time one request in every
	min, max  float64
	tolerance float64
	smoothing float64
	shares    [numPriorities]float64
	maxRetry  time.Duration

	// hot path
	limits   [numPriorities]atomic.Int64 // limit per priority
	inFlight atomic.Int64
	used     atomic.Bool // a request found its priority's limit half used since the last update
	filled   atomic.Bool // a request was refused with the whole limit in use since the last update
	timeAll  atomic.Bool // every request is timed: SampleEvery is 1, or requests are slow
	statuses atomic.Bool // a request was released with a status: a release without one is a panic
	shed     [numPriorities]atomic.Int64
	retry    atomic.Int64  // Retry-After hint, ns
	sig      atomic.Uint64 // float64 bits of the last signal

	// the batch: the samples since the last update
	n     atomic.Int64  // samples (with a Signal, served requests)
	sum   atomic.Int64  // Σx: their latencies, ns
	sq    atomic.Uint64 // float64 bits of Σx², ns²
	quad  atomic.Uint64 // float64 bits of Σx⁴, ns⁴
	seen  atomic.Int64  // the requests left in flight as each sample left
	peak  atomic.Int64  // the most requests in flight as a sample left, itself included
	first atomic.Int64  // when the first sample left, on the limiter's clock
	need  atomic.Int64  // the Σx a batch must reach: Samples × noLoad, ns
	again atomic.Int64  // the samples at which a batch that was not ready is looked at again
	want  atomic.Int64  // the samples an update needs: Samples, or a probe's

	epoch time.Time // the limiter's clock starts at New

	mu       sync.Mutex // held by the goroutine updating
	limit    float64    // guarded by mu
	noLoad   float64    // ns; guarded by mu; 0 until the first update
	lastMean float64    // ns; guarded by mu
	odd      float64    // ns; guarded by mu: the last update's mean, if queueing could not explain it
	recent   [3]float64 // ns; guarded by mu: the means of the updates since noLoad was learnt, newest first
	rising   bool       // guarded by mu: no update has lowered the limit yet
	raised   bool       // guarded by mu: the last update raised the limit
	probe    probe      // guarded by mu
	crowded  int        // guarded by mu: updates in a row that shed with the latency above the tolerance
	peaks    [2]int64   // guarded by mu: the peaks of the last two updates' batches, newest first

	// gate keeps out of a batch the samples of requests admitted under
	// another limit, from a probe's start and from its end: 0 lets every
	// sample in, draining (while a probe waits for the requests in flight
	// to fall below gateLimit) none, and n > 0 none of the next n
	// requests to leave, those that were in flight when the gate closed.
	gate      atomic.Int64
	gateLimit atomic.Int64
}

// draining is the gate's value while a probe waits for the requests in
// flight to fall below its limit.
const draining = -1

// passes reports whether the request leaving now, with others left in
// flight, may be a sample, and moves the gate g.
func (l *Limiter) passes(g, others int64) bool {
	for {
		switch {
		case g == 0:
			return true
		case g == draining:
			if others < l.gateLimit.Load() {
				// Every request in flight now was admitted before the
				// probe: the next others+1 to leave, this one included.
				l.gate.CompareAndSwap(draining, others)
			}
			return false
		case l.gate.CompareAndSwap(g, g-1):
			return false
		}
		g = l.gate.Load()
	}
}

// probe is the state of the controller's probes below its limit. A probe
// lowers the limit for one batch to depth × the limit; when the batch's
// latency falls with the requests in flight, the latency learnt as
// no-load was a queue's.
type probe struct {
	on       bool
	limit    float64 // the limit while the probe runs
	start    int64   // when its chain began, on the limiter's clock
	mean     float64 // the mean of the batch before it, ns
	others   float64 // the requests in flight as that batch's samples left
	first    float64 // the mean of the batch before its chain's first probe, ns
	low      float64 // the lowest latency its chain found queueing, ns; 0 if none
	clients  float64 // the clients of the closed loop the chain probes; 0 for another chain
	closedAt float64 // the no-load latency when a closed loop was last probed, ns; 0 if never
	next     int64   // the earliest start of the next probe
	spacing  float64 // the next probe waits spacing × the last one's length
	tried    bool    // an update has considered a probe
}

// New returns a Limiter configured by cfg, or a *core.ConfigError listing
// every problem.
func New(cfg Config) (*Limiter, error) {
	cfg = withDefaults(cfg)
	if problems := configProblems(cfg); len(problems) > 0 {
		return nil, &core.ConfigError{Problems: problems}
	}
	l := &Limiter{
		name: cfg.Name, priority: cfg.Priority, signal: cfg.Signal, target: cfg.Target,
		samples: cfg.Samples, every: uint32(cfg.SampleEvery), min: float64(cfg.Min), max: float64(cfg.Max),
		tolerance: cfg.Tolerance, smoothing: cfg.Smoothing,
		shares:   [numPriorities]float64{1, cfg.NormalShare, cfg.SheddableShare},
		maxRetry: cfg.MaxRetryAfter,
		limit:    float64(cfg.Initial),
		epoch:    time.Now(),
		rising:   true,
		probe:    probe{spacing: minSpacing, next: math.MinInt64},
	}
	l.setLimit(l.limit)
	// Until the first update every request is timed, and the first batch
	// waits for SampleEvery × Samples of them (see update): as many
	// requests as a batch of timed ones stands for later, so that a first
	// batch of fast requests alone (404s as the limiter starts, before a
	// slow request has finished) is no likelier than with SampleEvery.
	l.want.Store(l.samples)
	l.timeAll.Store(true)
	l.retry.Store(int64(time.Second))
	l.sig.Store(math.Float64bits(1))
	if l.signal != nil {
		l.sig.Store(math.Float64bits(0))
	}
	return l, nil
}

// withDefaults returns cfg with its zero fields set to their defaults,
// which for Max, Initial and SheddableShare depend on other fields.
func withDefaults(cfg Config) Config {
	if cfg.Name == "" {
		cfg.Name = "adaptive"
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.Max == 0 {
		cfg.Max = max(1000, cfg.Min)
	}
	if cfg.Initial == 0 {
		cfg.Initial = min(max(4, cfg.Min), cfg.Max)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 1.25
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = 0.5
	}
	if cfg.Samples == 0 {
		cfg.Samples = 10
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = 4
	}
	if cfg.NormalShare == 0 {
		cfg.NormalShare = 0.9
	}
	if cfg.SheddableShare == 0 {
		cfg.SheddableShare = min(0.5, cfg.NormalShare)
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = 10 * time.Second
	}
	return cfg
}

// configProblems lists every problem with cfg, after defaults, each
// naming the limit.
func configProblems(cfg Config) []error {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("adaptive %q: "+format, append([]any{cfg.Name}, args...)...))
	}
	if cfg.Min < 1 {
		bad("min %d is below 1", cfg.Min)
	}
	if cfg.Max < cfg.Min {
		bad("max %d is below min %d", cfg.Max, cfg.Min)
	}
	if cfg.Initial < cfg.Min || cfg.Initial > cfg.Max {
		bad("initial %d is outside [min %d, max %d]", cfg.Initial, cfg.Min, cfg.Max)
	}
	if !(cfg.Tolerance >= 1) || math.IsInf(cfg.Tolerance, 0) {
		bad("tolerance %v is below 1", cfg.Tolerance)
	}
	if !(cfg.Smoothing > 0 && cfg.Smoothing <= 1) {
		bad("smoothing %v is outside (0, 1]", cfg.Smoothing)
	}
	if cfg.Samples < 1 {
		bad("samples %d is below 1", cfg.Samples)
	}
	if cfg.SampleEvery < 1 {
		bad("sample every %d is below 1", cfg.SampleEvery)
	}
	if cfg.Signal != nil && !(cfg.Target > 0) {
		bad("a signal needs a positive target, not %v", cfg.Target)
	}
	if cfg.Signal == nil && cfg.Target != 0 {
		bad("target %v is set without a signal", cfg.Target)
	}
	if !(cfg.NormalShare > 0 && cfg.NormalShare <= 1) {
		bad("normal share %v is outside (0, 1]", cfg.NormalShare)
	}
	if !(cfg.SheddableShare > 0 && cfg.SheddableShare <= cfg.NormalShare) {
		bad("sheddable share %v is outside (0, normal share %v]", cfg.SheddableShare, cfg.NormalShare)
	}
	if cfg.MaxRetryAfter < time.Second {
		bad("max retry-after %v is below 1s", cfg.MaxRetryAfter)
	}
	return problems
}

// MustNew is New for configurations known to be valid; it panics on
// error. Use it at start-up only.
func MustNew(cfg Config) *Limiter {
	l, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return l
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Admit implements [core.Guard]: it lets r in when fewer requests than
// the limit for r's priority are in flight, and describes the limiter in
// s. It does not allocate.
func (l *Limiter) Admit(r *core.Request, s *core.GuardState) (ok, timed bool) {
	p := Critical
	if l.priority != nil {
		if p = l.priority(r); p < Critical || p > Sheddable {
			p = Sheddable
		}
	}
	if !l.admit(p, s) {
		return false, false
	}
	return true, l.signal == nil && (l.timeAll.Load() || rand.Uint32()%l.every == 0)
}

func (l *Limiter) admit(p Priority, s *core.GuardState) bool {
	limit := l.limits[p].Load()
	// Only an admitted request is counted: a refused one never adds
	// itself, even for a moment, so InFlight is what the limit holds and
	// a refusal means the limit's worth of requests are in.
	n := l.inFlight.Load()
	ok := false
	for n < limit {
		if l.inFlight.CompareAndSwap(n, n+1) {
			n, ok = n+1, true
			break
		}
		n = l.inFlight.Load()
	}
	if !ok {
		l.shed[p].Add(1)
	}
	// The limit is in use when a request finds at least half of what its
	// priority may use taken (itself included), or none left: compared
	// with its own priority's share, so that traffic of one priority can
	// raise the limit, and, for a share of 1, any request uses it.
	if (!ok || 2*n >= limit) && !l.used.Load() {
		l.used.Store(true)
	}
	// A refusal with the whole limit in use (full × the Critical limit at
	// least) shows the traffic filling the limit, though the requests in
	// flight as samples left may average less (the limit fell meanwhile,
	// or a queue was building): see startProbe.
	if !ok && float64(n) >= full*float64(l.limits[Critical].Load()) && !l.filled.Load() {
		l.filled.Store(true)
	}
	if s != nil {
		s.Name, s.Limit, s.InFlight, s.Priority = l.name, limit, n, int(p)
		s.Shed = l.shed[0].Load() + l.shed[1].Load() + l.shed[2].Load()
		s.Signal = math.Float64frombits(l.sig.Load())
		s.RetryAfter = time.Duration(l.retry.Load())
	}
	return ok
}

// Release implements [core.Guard]: it gives back the place of a request
// Admit let in. A request that was served, timed, and answered with a
// status of 200-499, or 0 while no release has had a status (see the
// package documentation), is a latency sample; with a Signal, every
// served request counts towards the next update. Once a batch of samples
// is ready, the goroutine that completed it updates the limit.
func (l *Limiter) Release(served bool, latency time.Duration, status int) {
	others := l.inFlight.Add(-1)
	if g := l.gate.Load(); g != 0 && !l.passes(g, others) {
		return
	}
	if !served {
		return
	}
	if l.signal != nil {
		if l.n.Add(1) >= l.samples && l.mu.TryLock() {
			l.updateAndUnlock()
		}
		return
	}
	if status != 0 && !l.statuses.Load() {
		l.statuses.Store(true)
	}
	if latency <= 0 || status != 0 && (status < 200 || status >= 500) || status == 0 && l.statuses.Load() {
		return
	}
	x := int64(latency)
	n := l.n.Add(1)
	if n == 1 {
		l.first.Store(l.now())
	}
	l.sum.Add(x)
	f := float64(x) * float64(x)
	addFloat(&l.sq, f)
	addFloat(&l.quad, f*f)
	l.seen.Add(others)
	for p := l.peak.Load(); others+1 > p; p = l.peak.Load() {
		if l.peak.CompareAndSwap(p, others+1) {
			break
		}
	}
	if n >= l.want.Load() && n >= l.again.Load() && l.sum.Load() >= l.need.Load() && l.mu.TryLock() {
		l.updateAndUnlock()
	}
}

// updateAndUnlock updates the limit and unlocks mu, which the caller
// locked, also when Signal panics: the panic reaches the Release that made
// the update, and the next batch updates again.
func (l *Limiter) updateAndUnlock() {
	defer l.mu.Unlock()
	l.update()
}

// addFloat adds f to the float64 whose bits u holds.
func addFloat(u *atomic.Uint64, f float64) {
	for {
		old := u.Load()
		if u.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+f)) {
			return
		}
	}
}

// now reads the limiter's clock, in ns.
func (l *Limiter) now() int64 { return int64(time.Since(l.epoch)) }

// A batch is ready for an update when it holds at least Samples samples
// and Samples × the no-load latency in all, and either tooMany × Samples
// samples or
//
//   - requests in flight, as its samples left, numbering at most slack +
//     explained × the requests in flight that its samples account for;
//   - samples that carry its weighted mean worth Samples / 2.
const (
	slack     = 1
	explained = 2
	tooMany   = 8
)

// Requests whose no-load latency is timeAllAbove or more are all timed:
// beside them, reading the clock twice costs nothing, and updates come
// SampleEvery times sooner where requests are few.
const timeAllAbove = time.Millisecond

// Queueing cannot explain a mean latency above odd × limit × the no-load
// latency: with L requests in flight a request waits for at most L − 1
// others, even on a handler that serves one at a time, so under
// sustained overload the mean stays below limit × the no-load latency.
// The factor leaves room for service times that vary and for a limit
// lowered while the samples were in flight: an update lowers it to no
// less than 3/4 of itself, 0.56 in two.
const odd = 2.5

// update moves the limit from the batch of samples gathered since the
// last update, if the batch is ready. The caller holds mu.
func (l *Limiter) update() {
	n := l.n.Load()
	if n < l.want.Load() { // another goroutine updated meanwhile
		return
	}
	if l.signal != nil {
		l.n.Add(-n)
		l.followSignal()
		return
	}
	sum := l.sum.Load()
	if sum < l.need.Load() {
		return
	}
	if l.probe.on {
		// A probe's batch (see startProbe) is carried by the requests its
		// limit admits, not by faster ones beside them: it needs that
		// many samples' worth of them.
		if sq := math.Float64frombits(l.sq.Load()); 2*sq*sq < float64(l.want.Load())*math.Float64frombits(l.quad.Load()) {
			l.again.Store(n + 1)
			return
		}
		mean, others, _ := l.drain()
		l.peaks = [2]int64{}
		l.lastMean = mean
		l.endProbe(mean, others)
		return
	}
	// A batch spans about one latency at least: its samples stand for
	// at least as many requests as were in flight as they left (Little's
	// law: that many leave in one latency). A change of the limit shows
	// in the latency of requests admitted after it, which leave that much
	// later, so updates more often than once a latency act on what the
	// last ones have not yet done (a handler serving hundreds at once
	// fills a batch of Samples many times a latency).
	if float64(n)*l.sampling() < float64(l.seen.Load())/float64(n) {
		l.again.Store(n + l.samples)
		return
	}
	if l.noLoad == 0 && n < l.samples*int64(l.every) && float64(l.seen.Load())/float64(n)+1 < full*l.limit {
		// The first batch waits for SampleEvery × Samples requests (see
		// New), unless they found the limit full: traffic that fills the
		// limit it starts at shows it too low (or, above the handler's
		// capacity, is probed), and at a limit of 1 and a service of
		// 200ms, 40 requests would take 8s.
		l.again.Store(n + 1)
		return
	}
	ready := l.batchReady(n, sum)
	// Past tooMany × Samples samples, the batch makes an update anyway,
	// so that neither one slow outlier nor requests in flight that are
	// not samples (slow errors) hold the controller up for long; but its
	// mean, which a few samples may carry, is not learnt as the no-load
	// latency for a change of traffic (see learn).
	if !ready && n < tooMany*l.samples {
		l.again.Store(n + l.samples)
		return
	}
	mean, others, peak := l.drain()
	// A closed loop keeps its clients in flight: the same peak, batch
	// after batch.
	loop := int64(0)
	if peak == l.peaks[0] && peak == l.peaks[1] {
		loop = peak
	}
	l.peaks = [2]int64{peak, l.peaks[0]}
	l.lastMean = mean
	filled := l.filled.Swap(false)
	if hold := l.learn(mean, ready); hold {
		l.publish(mean/l.noLoad, mean)
		return
	}
	if l.startProbe(mean, others, filled, loop) {
		return
	}
	l.adjust(mean, others)
}

// Probes (see Starting anywhere in the package documentation) find the
// no-load latency when the first updates learnt a queue's.
const (
	// maxDepth is the deepest a probe lowers the limit: to 1/Tolerance² of
	// it, and at most 0.8 of it.
	maxDepth = 0.8
	// A probe whose batch has fewer than fewer × the requests in flight
	// of the batch before it tells something; one that does not lower
	// them that much is not run.
	fewer = 0.85
	// Only an update that finds the requests in flight at full × the
	// limit or more, on average, may probe: the traffic holds the limit
	// full, as it does a start above the handler's capacity under
	// overload, and as it does the limit's level.
	full = 0.95
	// A probe whose latency is below (1 − margin) × the no-load latency
	// shows that the no-load latency was a queue's; one whose latency
	// fell by at least steep × the share by which the requests in flight
	// fell shows a queue at both levels. At the limit's level, Tolerance ×
	// the handler's capacity, a probe to depth 1/Tolerance² sees latency
	// fall by 1 − 1/Tolerance, 20% of the requests' 36% (0.56 of it).
	margin = 0.1
	steep  = 0.75
	// A closed loop of fewer clients is not probed: its probe, at a
	// limit of 1, would shed two of three for Samples of its latencies.
	fewestClosed = 4
	// minSpacing and maxSpacing bound the wait between probes, in
	// lengths of the last probe.
	minSpacing = 2
	maxSpacing = 64
)

// startProbe starts a probe instead of the update that measured mean
// with others in flight, if one is due, the traffic filled the limit (or
// is a closed loop below it) and the lower limit would take at least two
// requests out of those in flight, and reports whether it did. filled
// says a request was refused with the whole limit in use since the last
// update; loop, the clients of a closed loop (the same peak of requests
// in flight in three batches in a row), or 0. The caller holds mu.
func (l *Limiter) startProbe(mean, others float64, filled bool, loop int64) bool {
	// A limit that sheds while the latency is above what it tolerates,
	// in two updates in a row, is full, though the requests in flight as
	// the samples left average less (the limit fell meanwhile, or a queue
	// was building): the no-load latency may be a queue's. Poisson
	// arrivals below the capacity, which a limit near it sheds now and
	// then, do not raise the latency. At the limit's level the latency is
	// above the tolerance in about half the updates: once a probe has
	// found nothing (the wait before the next has grown), only the
	// requests in flight say the limit is full, until a probe finds a
	// queue again.
	if filled && mean > l.tolerance*l.noLoad {
		l.crowded++
	} else {
		l.crowded = 0
	}
	now := l.now()
	if now < l.probe.next {
		return false
	}
	// A limit the traffic does not fill holds no queue of its making,
	// and a probe would only shed, unless the traffic is a closed loop:
	// then the handler's queue may be what the no-load latency learnt,
	// and one probe below the loop's clients finds it. While the limit
	// rises from its start, one update probes: the first that finds the
	// limit full, whether the start was above the handler's capacity.
	atLimit := others+1 >= full*l.limit && !(l.rising && l.probe.tried)
	crowded := l.crowded >= 2 && l.probe.spacing <= minSpacing
	// A peak below the limit keeps the requests in flight below it too.
	clients := float64(loop)
	closed := loop >= fewestClosed && clients < full*math.Floor(l.limit) && !filled &&
		l.recent[2] > 0 && l.noLoad > (1+margin)*l.probe.closedAt
	if !atLimit && !crowded && !closed {
		return false
	}
	level := min(l.limit, others+1)
	if closed {
		others, level = clients-1, clients
	} else {
		l.probe.tried = true
		clients = 0
	}
	if !l.probeBelow(mean, others, level) {
		return false
	}
	l.crowded = 0
	l.probe.start, l.probe.first, l.probe.low, l.probe.clients = now, mean, 0, clients
	if closed {
		l.probe.closedAt = l.noLoad
	}
	return true
}

// probeBelow starts a probe at 1/Tolerance² (at most maxDepth) of level,
// the limit or the requests in flight, after a batch that measured mean
// with others in flight, if that takes at least two requests out of
// those in flight, and reports whether it did. The caller holds mu and
// sets the probe's chain.
func (l *Limiter) probeBelow(mean, others, level float64) bool {
	depth := min(maxDepth, 1/(l.tolerance*l.tolerance))
	limit := max(l.min, math.Floor(depth*level))
	if limit > min(fewer*(others+1), others-1) {
		return false
	}
	pr := &l.probe
	pr.on, pr.limit, pr.mean, pr.others = true, limit, mean, others
	// Its batch: Samples, or as many as its limit admits at once (about
	// one latency's worth), whichever is more, adding up to as many
	// no-load latencies.
	want := max(l.samples, int64(limit))
	l.want.Store(want)
	l.need.Store(int64(float64(want) * l.noLoad))
	l.gateLimit.Store(int64(limit))
	l.gate.Store(draining)
	l.setLimit(limit)
	return true
}

// endProbe ends the running probe with its batch's mean and requests in
// flight: probes again below it if it found a queue at both levels, or
// ends its chain, sets the limit from what the chain found and schedules
// the next. The caller holds mu.
func (l *Limiter) endProbe(mean, others float64) {
	now := l.now()
	pr := &l.probe
	pr.on = false
	l.want.Store(l.samples)
	l.used.Store(false)
	l.filled.Store(false)
	ratio := (others + 1) / (pr.others + 1)
	// Latency fell almost as steeply as the requests in flight: they
	// queued at both levels.
	steeply := ratio <= fewer && mean <= pr.mean*(1-steep*(1-ratio))
	// Fewer requests in flight took less than the no-load latency: it
	// was a queue's.
	lower := ratio <= fewer && mean < (1-margin)*l.noLoad
	if steeply || lower {
		pr.low = mean
		if mean < l.noLoad {
			l.noLoad, l.odd, l.recent = mean, 0, [3]float64{mean, mean, mean}
		}
	}
	l.need.Store(int64(float64(l.samples) * l.noLoad))
	if (lower || mean <= pr.mean*ratio) && l.probeBelow(mean, others, others+1) {
		// The no-load latency learnt was a queue's, or the latency fell
		// in proportion to the requests in flight (a queue at both
		// levels): the handler's capacity may be below this probe too.
		// Probe below it at once, rather than a few updates later, so
		// that a start far above the capacity finds it in a few
		// batches. At the limit's level, a probe that runs below the
		// capacity finds the no-load latency known, and the latency
		// falls less than the requests in flight: the chain ends.
		return
	}
	// The next batch takes no samples of requests the probe admitted.
	l.gate.Store(l.inFlight.Load())
	switch {
	case pr.low > 0:
		// The chain found a queue. The limit goes where the gradient of
		// the batch before the chain, with the lowest latency found as
		// no-load, takes it, without smoothing: the probes confirmed
		// the queue.
		// A closed loop's chain scales its clients, whom the limit
		// above them did not hold.
		base := l.limit
		if pr.clients > 0 {
			base = pr.clients
		}
		l.limit = max(l.min, min(l.limit, base*l.tolerance*pr.low/pr.first))
		l.rising = false
		pr.spacing = minSpacing
		pr.next = now + int64(minSpacing*float64(now-pr.start))
	case mean > l.tolerance*l.noLoad || pr.clients > 0:
		// The probe's own latency is above what the limit tolerates:
		// it ran above the level the no-load latency would set, and
		// tells nothing of it yet: probe again as soon as after one
		// that found a queue, once the gradient has lowered the limit.
		// A closed loop's start is probed again only once the no-load
		// latency has risen (see startProbe).
		pr.next = now + int64(minSpacing*float64(now-pr.start))
	default:
		pr.spacing = min(maxSpacing, 4*pr.spacing)
		pr.next = now + int64(pr.spacing*float64(now-pr.start))
	}
	l.setLimit(l.limit)
	l.publish(mean/l.noLoad, mean)
}

// followSignal moves the limit towards the Target of the supplied load
// signal, read once. The caller holds mu.
func (l *Limiter) followSignal() {
	signal := l.signal()
	gradient := 2.0
	if signal > 0 { // NaN and <= 0 read as no load
		gradient = l.target / signal
	}
	l.move(gradient, signal)
}

// sampling returns how many requests one sample stands for.
func (l *Limiter) sampling() float64 {
	if l.timeAll.Load() {
		return 1
	}
	return float64(l.every)
}

// batchReady reports whether the batch of n samples whose latencies sum
// to sum can speak for the requests in flight and holds enough samples
// that carry its mean.
func (l *Limiter) batchReady(n, sum int64) bool {
	// By Little's law, the requests in flight while the batch's samples
	// left number about SampleEvery × Σx / the batch's duration. A burst
	// of fast requests leaving around slow ones still in flight accounts
	// for few of those in flight: wait for the slow ones.
	ready := true
	if dt := l.now() - l.first.Load(); dt > 0 {
		inFlight := float64(l.seen.Load()) / float64(n)
		accounted := l.sampling() * float64(sum) / float64(dt)
		ready = inFlight <= slack+explained*accounted
	}
	// The latency-weighted mean Σx² / Σx is carried by the samples that
	// hold most of Σx²: many fast samples and two slow ones make a mean
	// of two samples. Wait until the batch holds enough of them: (Σx²)² /
	// Σx⁴ is their effective number (a batch of equal samples counts
	// them all).
	if sq := math.Float64frombits(l.sq.Load()); 2*sq*sq < float64(l.samples)*math.Float64frombits(l.quad.Load()) {
		ready = false
	}
	return ready
}

// drain empties the batch and returns its latency-weighted mean, in ns,
// the requests in flight as each of its samples left, on average, and
// the most of them, the sample included.
func (l *Limiter) drain() (mean, others float64, peak int64) {
	// A request leaving meanwhile may land in two batches: a negligible
	// skew.
	n, sum := l.n.Swap(0), l.sum.Swap(0)
	sq := math.Float64frombits(l.sq.Swap(0))
	others = float64(l.seen.Swap(0)) / float64(n)
	peak = l.peak.Swap(0)
	l.quad.Store(0)
	l.again.Store(0)
	return sq / float64(sum), others, peak
}

// learn updates the no-load latency from mean, the mean of a batch that
// was ready or that tooMany forced, and reports whether the limit is to
// be held instead of moved: when queueing cannot explain mean. The caller
// holds mu.
func (l *Limiter) learn(mean float64, ready bool) (hold bool) {
	unexplained := l.noLoad > 0 && mean > odd*l.limit*l.noLoad
	switch {
	case l.noLoad == 0 || l.limit <= l.min:
		l.relearn(mean)
	case unexplained && (l.odd == 0 || !ready):
		// Not queueing: the traffic changed (slow requests after fast
		// ones), or the handler became much slower; or, in a batch
		// that was not ready, a slow outlier. Hold the limit; if the
		// next ready batch confirms it, learn the no-load latency again.
		if ready {
			l.odd = mean
		}
		return true
	case unexplained:
		l.relearn(min(mean, l.odd))
	default:
		// A batch that was not ready (forced by tooMany) is no update
		// for settle: its mean, which a few samples or a change of
		// traffic in mid-batch may carry, must not become the no-load
		// latency, which, once settled, only goes down.
		l.odd = 0
		if ready {
			l.settle(mean)
		}
	}
	return false
}

// settle records mean, the mean of a ready batch, among the recent
// updates' and sets the no-load latency from them. Until three updates
// since it was learnt, the no-load latency is their median (the larger of
// two), up or down: one low first batch does not decide it. Then a lower
// mean lowers it only once the updates around it confirm it: the median
// of the latest three. The caller holds mu.
func (l *Limiter) settle(mean float64) {
	settled := l.recent[2] > 0
	l.recent = [3]float64{mean, l.recent[0], l.recent[1]}
	a, b, c := l.recent[0], l.recent[1], l.recent[2]
	switch {
	case settled:
		l.noLoad = min(l.noLoad, max(min(a, b), min(max(a, b), c)))
	case c > 0:
		l.noLoad = max(min(a, b), min(max(a, b), c))
	default:
		l.noLoad = max(a, b)
	}
}

// adjust moves the limit by how far mean is from the tolerated no-load
// latency, given others, the requests that were in flight as each sample
// left, on average, and publishes the update. The caller holds mu.
func (l *Limiter) adjust(mean, others float64) {
	l.need.Store(int64(float64(l.samples) * l.noLoad))
	l.timeAll.Store(l.every == 1 || l.noLoad >= float64(timeAllAbove))
	gradient := l.tolerance * l.noLoad / mean
	if gradient < 1 && others < l.tolerance-1 {
		// Waiting behind the requests the limit let in adds at most the
		// others in flight × the no-load latency: with so few, the
		// latency rose for another reason, and a lower limit would not
		// bring it down.
		gradient = 1
	}
	switch {
	case gradient < 1:
		l.rising = false
	case l.rising && others+1 >= full*l.limit && mean <= (1+l.tolerance)/2*l.noLoad:
		// Until the latency first calls for a lower limit, the limit
		// doubles while the traffic fills it and the latency stays
		// within half the tolerance of the no-load latency, so that a
		// start far below the handler's capacity reaches it in a few
		// updates, overshooting it at most twofold; a limit only partly
		// filled rises by the gradient, and past half the tolerance a
		// queue is forming.
		gradient = 2
	case gradient > 1 && l.raised:
		// The batch after a rise left mostly under the old limit: the
		// new one's latency is not known yet, and a rise on top of it
		// could overshoot the level (after a doubling, the capacity
		// more than twofold). Only a full limit doubles again.
		gradient = 1
	}
	l.move(gradient, mean/l.noLoad)
	l.publish(mean/l.noLoad, mean)
}

// relearn takes mean as the no-load latency. The caller holds mu.
func (l *Limiter) relearn(mean float64) {
	l.noLoad, l.odd, l.recent = mean, 0, [3]float64{mean}
}

// move sets the limit to limit × gradient (clamped to [0.5, 2]), within
// [Min, Max], and records signal. The caller holds mu.
func (l *Limiter) move(gradient, signal float64) {
	gradient = max(0.5, min(2, gradient))
	if used := l.used.Swap(false); gradient > 1 && !used {
		gradient = 1 // the traffic does not use the limit: do not raise it
	}
	next := l.limit * gradient
	l.raised = gradient > 1
	if gradient < 1 {
		// Latency noise must not halve the limit at once; a rise is
		// bounded by the tolerance already.
		next = l.limit + (next-l.limit)*l.smoothing
	}
	l.limit = max(l.min, min(l.max, next))
	l.setLimit(l.limit)
	l.sig.Store(math.Float64bits(signal))
}

// publish records the signal and the Retry-After hint of a latency
// update. The caller holds mu.
func (l *Limiter) publish(signal, mean float64) {
	l.sig.Store(math.Float64bits(signal))
	retry := min(max(time.Duration(2*mean), time.Second), l.maxRetry)
	l.retry.Store(int64(retry))
}

// setLimit publishes limit for each priority: its share, rounded down,
// at least 1.
func (l *Limiter) setLimit(limit float64) {
	whole := math.Floor(limit)
	for p, share := range l.shares {
		l.limits[p].Store(int64(max(1, math.Floor(whole*share))))
	}
}

// Stats is a snapshot of a Limiter's state.
type Stats struct {
	// Limit is the limit the controller set (for Critical requests;
	// Normal and Sheddable ones get their share of it).
	Limit int64
	// Probing is true while a probe runs (see the package documentation):
	// for one batch, requests are admitted up to a lower limit, which
	// their GuardState.Limit shows.
	Probing bool
	// InFlight is the number of admitted requests inside the limiter now:
	// never more than the limit in force when the last of them was
	// admitted (a limit lowered since may be below it), and refused
	// requests are never counted.
	InFlight int64
	// Shed counts the requests shed since the limiter was created, by
	// priority (index Critical, Normal, Sheddable).
	Shed [3]int64
	// Signal is the load signal the controller last acted on: the ratio of
	// the latency-weighted mean to the no-load latency, or the value of
	// Config.Signal.
	Signal float64
	// Latency is the latency-weighted mean of the last update's samples,
	// and NoLoad the no-load latency; both 0 before the first update.
	Latency, NoLoad time.Duration
}

// Stats returns the limiter's state. It briefly takes the lock the
// controller updates under.
func (l *Limiter) Stats() Stats {
	s := Stats{InFlight: l.inFlight.Load(), Signal: math.Float64frombits(l.sig.Load())}
	for p := range s.Shed {
		s.Shed[p] = l.shed[p].Load()
	}
	l.mu.Lock()
	s.Limit, s.Probing = int64(l.limit), l.probe.on
	s.Latency, s.NoLoad = time.Duration(l.lastMean), time.Duration(l.noLoad)
	l.mu.Unlock()
	return s
}
