// Package scale lowers budgets' quotas with load or on a schedule: a
// [Controller] is a [core.Scaler] whose scale, a factor in (0, 1], follows
// a load signal the application supplies towards a target, or a weekly
// schedule, or both. Give it to the budgets it scales:
//
//	cpu := scale.MustNew(scale.Config{Signal: cpuBusy, Target: 0.7})
//	budget := core.Budget{Name: "per_client", Quota: 600, Window: time.Minute, Key: key, Scale: cpu}
//
// At scale f a budget's quota is floor(quota × f), at least 1 (a token
// bucket's rate and burst fall together; see [core.Scaler]), and the
// RateLimit fields announce the scaled quota, so that a client that paces
// itself on them (package nethttp/pacer) slows down before it is denied.
// Unlike a load shedder (package core/adaptive), which answers 503 to
// whichever request arrives when the server is full, a scaled quota
// shares what the server can do between the clients, each told its part.
//
// # The controller
//
// The scale starts at 1 and is updated at most once per Interval, by the
// first call to Scale after an Interval has passed: there is no
// goroutine, and nothing to close. An update reads the signal once,
// divides it by the scale in effect since the last update and smooths
// the quotient, the load that the traffic would cause at full scale,
// with an exponentially weighted moving average (a quarter of the weight
// on the newest reading). Assuming the load grows with the scale, the
// scale that puts the signal at Target is
//
//	desired = Target / smoothed load at full scale = scale × Target / signal
//
// within [Min, 1]. The update moves the scale towards desired by at most
// Step, never past it, and not at all while desired is less than Deadband
// away: a signal within a deadband's worth of Target leaves the scale
// where it is. A move against the direction of the last one needs desired
// two Deadbands away, so that noise around the target does not move the
// scale back and forth. Under steady demand the scale thus falls (or
// rises) by Step per Interval, in one direction, and stops within a
// Deadband or two of the level that puts the signal at Target; the
// smoothed load approaches the demand from one side, so the scale does
// not overshoot. Step and Deadband are independent: a large Step moves in
// a few large moves, a small Deadband follows the signal closely.
//
// # Threshold rules
//
// With Config.Above set, the signal sets the scale by a threshold
// instead: Above while the signal reads above Target, and 1 once it reads
// at or below Target × (1 − Deadband) ("halve every quota while the CPU is
// above 80%"). Between the two the scale stays as it is. The change is
// made at the first update that reads the signal past the threshold, all
// at once; Min and Step do not apply.
//
// One Step per update bounds what a client can be surprised by: the
// quota it was told falls by at most Step × the quota per Interval, so a
// client is never denied more than one step's worth of what it was told
// it had left (a token bucket's remaining falls in proportion: a step of
// 5% at scale 0.5 takes a tenth of it). A client that paces itself on the fields meets a 429
// only when the scale falls between the answer that told it and the
// request that spends its last units; its pacer then waits the
// Retry-After. A raise has no such bound to keep: when
// several Intervals passed since the last update (no request came), the
// update may raise the scale by a Step per Interval passed, and the
// smoothing gives the new reading the weight of all of them, so a server
// that was idle for as many Intervals as it had Steps to climb comes back
// at full quota at the first request, not a Step per request.
//
// # The signal
//
// Config.Signal measures the process, not a request: CPU use, the depth of
// a work queue, the workers busy, a downstream's latency or errors as seen
// by all requests. It must be quick and safe for concurrent use: it runs
// on the goroutine of the request that makes the update. A value of 0, a
// negative one or NaN reads as no load. Noise within a step's worth of
// Target is absorbed by the deadband; noise of several deadbands' worth
// moves the scale a step now and then. Give a noisy signal as a mean over the
// Interval (examples/scaled gives the queue's mean depth since the last
// update, not its depth at that moment).
//
// Because the signal is the process's, a client steers it only by loading
// the process: its cheap requests (a 404, a cached answer) add nothing to
// the CPU or to the queue and leave the scale where it is, and its heavy
// ones lower the scale, which its own budget then holds to its share. No
// pattern of requests can raise the scale above what the load allows. Do
// not use a signal that averages over requests, such as the mean latency
// of the requests served: a client could lower it with a flood of cheap
// requests, raising every quota while the server is overloaded, or raise
// it with a few slow ones, lowering everyone else's quota. If latency is
// the signal, take it from the work the server does (a downstream's
// latency, a queue's wait), where each unit of work weighs what it costs.
//
// # The schedule
//
// Config.Schedule lowers the scale during [Period]s of the week, read in
// Config.Location (default UTC): "Mon-Fri 09:00-18:00" at 50% halves
// every quota during office hours. Where periods overlap the lowest scale
// applies. A period's scale applies at the first update after it starts
// (within an Interval), all at once, and not one Step at a time.
//
// With both a signal and a schedule, the scale is the lower of the
// schedule's and the signal's; the signal's stays within [Min, 1], while a
// period may set a scale below Min. A Controller needs at least one of
// the two. To combine a Controller with a [core.Scaler] of your own (or
// with other Controllers), give the budget [Lowest] of them.
//
// # Several budgets, several instances
//
// One Controller may scale several budgets: they share its scale. Each
// process has its own Controllers: N instances behind a load balancer
// each follow their own signal, and with a shared store each applies its
// own scale to the shared counters, so in any window a key is admitted at
// most the largest scaled quota among the instances (never more than the
// unscaled quota), and instances with lower scales deny it earlier.
//
// [Controller.Stats] reports the scale, the signal and the number of
// changes; core/metrics and core/otelmetrics export them (WatchScale),
// and core/inspect shows each scaled budget's factor.
package scale

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Config configures a [Controller]. Signal and Target, or Schedule, or
// all three, are required; the other fields have defaults.
type Config struct {
	// Name names the controller in errors and in Stats. Default "scale".
	Name string
	// Signal, if set, is the load signal the scale follows: a value that
	// grows with the load on the process (CPU use, a queue's depth), read
	// at most once per Interval. It must be quick and safe for concurrent
	// use; 0, a negative value or NaN reads as no load. It runs on the
	// goroutine of the request that makes the update: a panic goes on up
	// that request, and the controller keeps its scale and updates at the
	// next Interval. See the package documentation for which signals a
	// client cannot steer.
	Signal func() float64
	// Target is the value of Signal the scale keeps the load at. Required,
	// and positive, with Signal.
	Target float64
	// Min is the lowest scale the signal sets. Default 0.25; in (0, 1].
	Min float64
	// Step is the most one update moves the scale by (a raise after an
	// idle spell excepted). Default 0.05; in (0, 1].
	Step float64
	// Deadband is how far the scale that would put the signal at Target
	// must be from the scale for an update to move it (twice that against
	// the direction of the last move); with Above, how far below Target
	// the signal must read for the scale to return to 1. Default 0.05; in
	// [0, 1). Set it negative for 0 (none).
	Deadband float64
	// Above, if set, makes the signal a threshold (see the package
	// documentation, Threshold rules): the scale is Above while the
	// signal reads above Target, and 1 once it reads at or below
	// Target × (1 − Deadband). In (0, 1]; it needs Signal, and leaves Min
	// and Step unused.
	Above float64
	// Interval is the least time between two updates. Default 500ms: with
	// the default Step, a scale that must halve gets there in 5 s. At
	// least 1ms.
	Interval time.Duration
	// Schedule lists periods of the week with a lower scale.
	Schedule []Period
	// Location is the time zone the Schedule's days and times are read
	// in. Default UTC.
	Location *time.Location
	// Clock tells the time, for tests. Default the system's clock.
	Clock core.Clock
}

// DefaultInterval is Config.Interval's default.
const DefaultInterval = 500 * time.Millisecond

// smoothing is the weight of the newest reading in the moving average of
// the load at full scale.
const smoothing = 0.25

// reverse is how many Steps away the desired scale must be for a move
// against the direction of the last one.
const reverse = 2

// Controller is a [core.Scaler] whose scale follows a load signal, a
// schedule, or both (see the package documentation). It is safe for
// concurrent use. Create it with [New].
type Controller struct {
	name     string
	signal   func() float64
	target   float64
	min      float64
	step     float64
	deadband float64
	above    float64 // threshold mode's scale; 0 for the proportional rule
	interval int64   // ns
	schedule []Period
	loc      *time.Location
	clock    core.Clock // nil: the system's
	epoch    time.Time

	// hot path
	scale atomic.Uint64 // float64 bits of the scale
	next  atomic.Int64  // ns since epoch at which the next update is due

	mu       sync.Mutex // held by the goroutine updating, and by Stats
	last     int64      // the Interval of the last update, counted from New; guarded by mu
	sig      float64    // the signal's scale, within [min, 1] (threshold mode: above or 1); guarded by mu
	load     float64    // smoothed load at full scale; guarded by mu; NaN before the first reading
	raw      float64    // last signal read; guarded by mu
	dir      int        // direction of the signal's scale's last move: -1, 0 or 1; guarded by mu
	changes  int64      // guarded by mu
	inPeriod float64    // the schedule's scale at the last update; guarded by mu
}

// New returns a Controller configured by cfg, or a *core.ConfigError
// listing every problem.
func New(cfg Config) (*Controller, error) {
	cfg = withDefaults(cfg)
	if problems := configProblems(cfg); len(problems) > 0 {
		return nil, &core.ConfigError{Problems: problems}
	}
	c := &Controller{
		name: cfg.Name, signal: cfg.Signal, target: cfg.Target, min: cfg.Min, step: cfg.Step,
		deadband: max(0, cfg.Deadband), above: cfg.Above,
		interval: int64(cfg.Interval), schedule: append([]Period(nil), cfg.Schedule...),
		loc: cfg.Location, clock: cfg.Clock,
		sig: 1, load: math.NaN(), inPeriod: 1,
	}
	if c.clock != nil {
		c.epoch = c.clock.Now()
	} else {
		c.epoch = time.Now()
	}
	c.inPeriod = c.scheduled(c.epoch)
	c.scale.Store(math.Float64bits(c.inPeriod))
	c.next.Store(c.interval)
	return c, nil
}

// MustNew is New for configurations known to be valid; it panics on
// error. Use it at start-up only.
func MustNew(cfg Config) *Controller {
	c, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return c
}

// withDefaults returns cfg with its zero fields set to their defaults.
func withDefaults(cfg Config) Config {
	if cfg.Name == "" {
		cfg.Name = "scale"
	}
	if cfg.Min == 0 {
		cfg.Min = 0.25
	}
	if cfg.Step == 0 {
		cfg.Step = 0.05
	}
	if cfg.Deadband == 0 {
		cfg.Deadband = 0.05
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	return cfg
}

// configProblems lists every problem with cfg, after defaults, each
// naming the controller.
func configProblems(cfg Config) []error {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("scale %q: "+format, append([]any{cfg.Name}, args...)...))
	}
	if cfg.Signal == nil && len(cfg.Schedule) == 0 {
		bad("needs a signal or a schedule")
	}
	if cfg.Signal != nil && !(cfg.Target > 0 && !math.IsInf(cfg.Target, 1)) {
		bad("a signal needs a positive target, not %v", cfg.Target)
	}
	if cfg.Signal == nil && cfg.Target != 0 {
		bad("target %v is set without a signal", cfg.Target)
	}
	if !(cfg.Min > 0 && cfg.Min <= 1) {
		bad("min %v is outside (0, 1]", cfg.Min)
	}
	if !(cfg.Step > 0 && cfg.Step <= 1) {
		bad("step %v is outside (0, 1]", cfg.Step)
	}
	if !(cfg.Deadband < 1) || math.IsNaN(cfg.Deadband) {
		bad("deadband %v is not below 1", cfg.Deadband)
	}
	if cfg.Above != 0 {
		if !(cfg.Above > 0 && cfg.Above <= 1) {
			bad("above %v is outside (0, 1]", cfg.Above)
		}
		if cfg.Signal == nil {
			bad("above %v is set without a signal", cfg.Above)
		}
	}
	if cfg.Interval < time.Millisecond {
		bad("interval %v is below 1ms", cfg.Interval)
	}
	for i, p := range cfg.Schedule {
		for _, why := range p.problems() {
			bad("schedule[%d] (%s): %s", i, p, why)
		}
	}
	return problems
}

// Name returns the controller's name.
func (c *Controller) Name() string { return c.name }

// Scale implements [core.Scaler]: it returns the current scale, in
// (0, 1]. Once an Interval has passed since the last update, the call
// that finds it so makes the next update (others go on with the scale as
// it is). Otherwise it reads the clock and two atomic values, and does
// not allocate.
func (c *Controller) Scale() float64 {
	if now := c.now(); now >= c.next.Load() && c.mu.TryLock() {
		c.updateAndUnlock(now)
	}
	return math.Float64frombits(c.scale.Load())
}

// updateAndUnlock makes the update at now unless another call made it
// meanwhile, and unlocks mu, which the caller locked, also when Signal
// panics: the panic reaches the call that made the update, and the next
// Interval's call updates again.
func (c *Controller) updateAndUnlock(now int64) {
	defer c.mu.Unlock()
	if now >= c.next.Load() { // not updated meanwhile
		c.update(now)
	}
}

// now reads the controller's clock: ns since New.
func (c *Controller) now() int64 {
	if c.clock == nil {
		return int64(time.Since(c.epoch))
	}
	return int64(c.clock.Now().Sub(c.epoch))
}

// update moves the scale at now, in ns since epoch. The caller holds mu.
func (c *Controller) update(now int64) {
	// Updates fall in Intervals counted from New: at most one in each,
	// with no drift however late the request that makes it comes.
	tick := now / c.interval
	c.next.Store((tick + 1) * c.interval)
	// An idle spell counts as that many updates for the smoothing and for
	// a raise.
	passed := max(1, tick-c.last)
	c.last = tick
	current := math.Float64frombits(c.scale.Load())
	if c.signal != nil {
		c.follow(current, passed)
	}
	scale := c.sig
	if len(c.schedule) > 0 {
		c.inPeriod = c.scheduled(c.epoch.Add(time.Duration(now)))
		scale = min(scale, c.inPeriod)
	}
	if scale != current {
		c.changes++
		c.scale.Store(math.Float64bits(scale))
	}
}

// round rounds a scale so that a sum of Steps reads as written (0.45, not
// 0.44999999999999996).
func round(f float64) float64 { return math.Round(f*1e12) / 1e12 }

// follow reads the signal and moves the signal's scale. current is the
// scale in effect since the last update, passed the Intervals since then.
// The caller holds mu.
func (c *Controller) follow(current float64, passed int64) {
	signal := c.signal()
	c.raw = signal
	if !(signal > 0) { // NaN and <= 0 read as no load
		signal = 0
	}
	if c.above > 0 {
		c.threshold(signal)
		return
	}
	// The load at full scale, bounded so that one absurd reading (+Inf)
	// does not hold the average for long: a load that would want half of
	// Min is as good as any higher one.
	load := min(signal/current, 2*c.target/c.min)
	if math.IsNaN(c.load) {
		c.load = load
	} else {
		w := 1 - math.Pow(1-smoothing, float64(passed))
		c.load += w * (load - c.load)
	}
	// The scale that would put the signal at Target, not held within
	// [Min, 1]: the deadband is measured against it.
	desired := math.Inf(1)
	if c.load > 0 {
		desired = c.target / c.load
	}
	scale := c.sig
	gap := desired - scale
	dir := 1
	if gap < 0 {
		dir, gap = -1, -gap
	}
	if dir > 0 && scale >= 1 || dir < 0 && scale <= c.min {
		return
	}
	band := c.deadband
	if c.dir != 0 && dir != c.dir {
		band *= reverse // against the last move
	}
	if gap < band-1e-9 || gap < 1e-9 {
		return
	}
	if dir < 0 {
		// Down by a Step, never more, not past desired.
		c.sig = max(c.min, round(scale-min(c.step, gap)))
	} else {
		// Up by a Step per Interval passed, not past desired.
		c.sig = min(1, round(scale+min(float64(passed)*c.step, gap)))
	}
	c.dir = dir
}

// threshold sets the signal's scale by the threshold rule (Config.Above)
// from the signal read. The caller holds mu.
func (c *Controller) threshold(signal float64) {
	switch {
	case signal > c.target:
		c.sig = c.above
	case signal <= c.target*(1-c.deadband):
		c.sig = 1
	}
}

// scheduled returns the schedule's scale at t: the lowest of the periods
// that hold t, 1 outside them.
func (c *Controller) scheduled(t time.Time) float64 {
	scale := 1.0
	t = t.In(c.loc)
	for _, p := range c.schedule {
		if p.covers(t) {
			scale = min(scale, p.Scale)
		}
	}
	return scale
}

// Stats is a snapshot of a Controller's state.
type Stats struct {
	// Scale is the current scale, in (0, 1].
	Scale float64
	// Signal is the value of Config.Signal the last update read; 0
	// without a signal or before the first update.
	Signal float64
	// Smoothed is the smoothed signal: what the controller expects the
	// signal to be at the current scale, from the moving average of the
	// load. 0 without a signal or before the first update.
	Smoothed float64
	// Scheduled is the schedule's scale at the last update: 1 outside its
	// periods or without a schedule.
	Scheduled float64
	// Changes counts the updates that changed the scale.
	Changes int64
}

// Stats returns the controller's state. It briefly takes the lock an
// update holds, and makes no update.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Scale: math.Float64frombits(c.scale.Load()), Signal: c.raw, Scheduled: c.inPeriod, Changes: c.changes}
	if !math.IsNaN(c.load) {
		s.Smoothed = c.load * s.Scale
	}
	return s
}
