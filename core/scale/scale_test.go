package scale_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/scale"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// t0 is a Monday, 00:00 UTC.
var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// plant is a service whose load signal is demand × scale / capacity: the
// load that the traffic admitted at the scale in effect puts on it. Noise,
// if set, multiplies each reading by 1 + a value drawn evenly from
// [-Noise, Noise].
type plant struct {
	demand, capacity float64
	noise            float64
	rng              *rand.Rand
	inEffect         float64 // the scale the traffic was admitted at
}

func (p *plant) signal() float64 {
	s := p.demand * p.inEffect / p.capacity
	if p.noise > 0 {
		s *= 1 + p.noise*(2*p.rng.Float64()-1)
	}
	return s
}

// sim is a Controller driven by a plant on a fake clock.
type sim struct {
	t     *testing.T
	clk   *fakeclock.Clock
	plant *plant
	c     *scale.Controller
}

func newSim(t *testing.T, cfg scale.Config, p *plant) *sim {
	t.Helper()
	clk := fakeclock.New(t0)
	p.inEffect = 1
	if p.rng == nil {
		p.rng = rand.New(rand.NewPCG(1, 2))
	}
	cfg.Clock = clk
	if cfg.Signal == nil && cfg.Schedule == nil {
		cfg.Signal = p.signal
	}
	c, err := scale.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, clk: clk, plant: p, c: c}
}

// run advances the clock n Intervals, one request at each, and returns
// the scale after each.
func (s *sim) run(n int, interval time.Duration) []float64 {
	out := make([]float64, n)
	for i := range n {
		s.clk.Advance(interval)
		s.plant.inEffect = s.c.Scale()
		out[i] = s.plant.inEffect
	}
	return out
}

// reversals counts the changes of direction in scales.
func reversals(scales []float64) (n int) {
	dir := 0
	for i := 1; i < len(scales); i++ {
		d := 0
		switch {
		case scales[i] > scales[i-1]:
			d = 1
		case scales[i] < scales[i-1]:
			d = -1
		}
		if d != 0 {
			if dir != 0 && d != dir {
				n++
			}
			dir = d
		}
	}
	return n
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestStepInDemand: demand rising past capacity makes the scale fall
// monotonically, one Step at a time, to the level that puts the signal
// at the target, and stay there while demand holds; once demand ends it
// climbs back to 1, monotonically.
func TestStepInDemand(t *testing.T) {
	p := &plant{demand: 50, capacity: 100}
	s := newSim(t, scale.Config{Target: 0.7}, p)
	for i, f := range s.run(20, scale.DefaultInterval) {
		if f != 1 {
			t.Fatalf("below target, interval %d: scale %v, want 1", i, f)
		}
	}
	// 150% of capacity: the scale that puts the signal at 0.7 is 0.467.
	p.demand = 150
	down := s.run(30, scale.DefaultInterval)
	for i := 1; i < len(down); i++ {
		if down[i] > down[i-1] {
			t.Fatalf("demand constant, scale rose at interval %d: %v", i, down)
		}
		if down[i-1]-down[i] > 0.05+1e-9 {
			t.Fatalf("scale fell by more than a step at interval %d: %v", i, down)
		}
	}
	settled := down[len(down)-1]
	if settled != 0.5 {
		t.Fatalf("after 30 intervals of 150%% demand the scale is %v, want 0.5, the step above 0.467: %v", settled, down)
	}
	reached := -1
	for i, f := range down {
		if near(f, settled) {
			reached = i
			break
		}
	}
	if reached+1 > 20 {
		t.Errorf("the scale reached %v after %d intervals, want at most 20 (10 steps)", settled, reached+1)
	}
	if sig := p.demand * settled / p.capacity; sig < 0.7-1e-9 || sig > 0.7*1.1 {
		t.Errorf("settled signal %v, want 0.7 to 10%% above", sig)
	}
	for i, f := range s.run(200, scale.DefaultInterval) {
		if f != settled {
			t.Fatalf("constant demand, interval %d: scale %v moved from %v", i, f, settled)
		}
	}
	st := s.c.Stats()
	if st.Scale != settled || !near(st.Signal, p.demand*settled/p.capacity) || math.Abs(st.Smoothed-st.Signal) > 1e-6 {
		t.Errorf("stats %+v, want scale %v and signal %v smoothed to itself", st, settled, p.demand*settled/p.capacity)
	}
	if st.Changes != int64(math.Round((1-settled)/0.05)) {
		t.Errorf("stats: %d changes, want %v", st.Changes, math.Round((1-settled)/0.05))
	}

	p.demand = 0 // the load ends
	up := s.run(30, scale.DefaultInterval)
	for i := 1; i < len(up); i++ {
		if up[i] < up[i-1] {
			t.Fatalf("after the load, scale fell at interval %d: %v", i, up)
		}
	}
	if up[len(up)-1] != 1 {
		t.Errorf("30 intervals after the load ended the scale is %v, want 1: %v", up[len(up)-1], up)
	}
}

// TestSmallerLoadRaisesTheScaleBack: demand falling to a level that a
// higher scale keeps under target raises it to that level, not to 1.
func TestSmallerLoadRaisesTheScaleBack(t *testing.T) {
	p := &plant{demand: 280, capacity: 100} // wants 0.25
	s := newSim(t, scale.Config{Target: 0.7}, p)
	if f := s.run(40, scale.DefaultInterval); f[len(f)-1] != 0.25 {
		t.Fatalf("at 280%% demand: scale %v, want Min 0.25", f[len(f)-1])
	}
	p.demand = 100 // wants 0.7
	up := s.run(40, scale.DefaultInterval)
	if reversals(up) != 0 {
		t.Errorf("demand constant, the scale changed direction: %v", up)
	}
	if f := up[len(up)-1]; f < 0.65-1e-9 || f > 0.7+1e-9 {
		t.Errorf("at 100%% demand: scale %v, want within two steps below 0.7 (a reversal needs two): %v", f, up)
	}
}

// TestIdleRecoversAtOnce: a server idle for many Intervals (no request
// made an update) comes back at full scale at the first request, not a
// Step per request.
func TestIdleRecoversAtOnce(t *testing.T) {
	p := &plant{demand: 400, capacity: 100}
	s := newSim(t, scale.Config{Target: 0.7}, p)
	if f := s.run(40, scale.DefaultInterval); f[len(f)-1] != 0.25 {
		t.Fatalf("at 400%% demand: scale %v, want 0.25", f[len(f)-1])
	}
	p.demand = 0
	s.clk.Advance(time.Minute)
	if f := s.c.Scale(); f != 1 {
		t.Errorf("a minute idle, first request: scale %v, want 1", f)
	}
	// A short pause raises by a Step per Interval passed, at most.
	p.demand = 400
	s.run(40, scale.DefaultInterval)
	p.demand = 0
	s.clk.Advance(3 * scale.DefaultInterval)
	if f := s.c.Scale(); !near(f, 0.4) {
		t.Errorf("3 intervals idle from 0.25: scale %v, want 0.4", f)
	}
}

// TestNoiseAroundTarget: a signal whose noise stays within a step's worth
// of the target does not move the scale; noise of three steps' worth
// moves it a handful of times in half an hour, by a step; noise of six
// keeps it within two steps of its level, moving in fewer than one
// Interval in ten.
func TestNoiseAroundTarget(t *testing.T) {
	for _, c := range []struct {
		noise     float64
		maxMoves  int
		maxSpread float64
	}{
		{0.04, 0, 0},
		{0.15, 6, 0.1},
		{0.3, 200, 0.15},
	} {
		// Demand that the scale 0.6 puts at the target.
		p := &plant{demand: 0.7 / 0.6 * 100, capacity: 100}
		s := newSim(t, scale.Config{Target: 0.7}, p)
		s.run(30, scale.DefaultInterval) // settle, without noise
		start := s.c.Scale()
		p.noise = c.noise
		got := s.run(2000, scale.DefaultInterval)
		lo, hi, moves := start, start, 0
		for i, f := range got {
			lo, hi = min(lo, f), max(hi, f)
			if i > 0 && f != got[i-1] {
				moves++
			}
		}
		t.Logf("noise ±%v%%: scale from %v in [%v, %v], %d moves, %d reversals in 2000 intervals", c.noise*100, start, lo, hi, moves, reversals(got))
		if moves > c.maxMoves || hi-lo > c.maxSpread+1e-9 {
			t.Errorf("noise ±%v%%: %d moves within [%v, %v], want at most %d within %v", c.noise*100, moves, lo, hi, c.maxMoves, c.maxSpread)
		}
	}
}

// TestAtMostOneUpdatePerInterval: calls within an Interval read the
// signal once.
func TestAtMostOneUpdatePerInterval(t *testing.T) {
	clk := fakeclock.New(t0)
	reads := 0
	c := scale.MustNew(scale.Config{Signal: func() float64 { reads++; return 10 }, Target: 1, Interval: time.Second, Clock: clk})
	for range 5000 {
		clk.Advance(time.Millisecond)
		c.Scale()
	}
	if reads != 5 {
		t.Errorf("5 s of calls every ms: the signal was read %d times, want 5", reads)
	}
}

// TestSignalEdgeValues: 0, negative and NaN signals read as no load, an
// infinite one as a load that wants Min, and one such reading does not
// hold the scale down for long.
func TestSignalEdgeValues(t *testing.T) {
	clk := fakeclock.New(t0)
	v := math.Inf(1)
	c := scale.MustNew(scale.Config{Signal: func() float64 { return v }, Target: 1, Clock: clk})
	clk.Advance(time.Second)
	if f := c.Scale(); !near(f, 0.95) {
		t.Fatalf("after +Inf: scale %v, want one step down", f)
	}
	for _, x := range []float64{0, -1, math.NaN()} {
		v = x
		for range 15 {
			clk.Advance(time.Second)
			c.Scale()
		}
		if f := c.Scale(); f != 1 {
			t.Errorf("signal %v for 15 intervals: scale %v, want 1", x, f)
		}
	}
}

// TestSignalPanicReachesTheCallerOnly: a Signal that panics panics the
// call that made the update, and the controller goes on: the next
// Interval's call updates from the signal again, and Stats answers.
func TestSignalPanicReachesTheCallerOnly(t *testing.T) {
	clk := fakeclock.New(t0)
	var calls atomic.Int32
	c := scale.MustNew(scale.Config{Target: 1, Clock: clk, Signal: func() float64 {
		if calls.Add(1) == 1 {
			panic("signal not ready")
		}
		return 10
	}})
	clk.Advance(time.Second)
	func() {
		defer func() {
			if r := recover(); r != "signal not ready" {
				t.Errorf("the update's call recovered %v, want the signal's panic", r)
			}
		}()
		c.Scale()
	}()
	clk.Advance(time.Second)
	if f := c.Scale(); !near(f, 0.95) {
		t.Fatalf("the update after the panic: scale %v, want one step down (the signal reads 10, target 1)", f)
	}
	if st := c.Stats(); st.Signal != 10 || st.Changes != 1 {
		t.Errorf("stats = %+v, want the signal 10 read and one change", st)
	}
}

// TestConfigReportsEveryProblem lists the configuration rules.
func TestConfigReportsEveryProblem(t *testing.T) {
	_, err := scale.New(scale.Config{Name: "cpu", Target: 3, Min: 1.5, Step: -1, Interval: time.Microsecond,
		Schedule: []scale.Period{{Start: 25 * time.Hour, End: 25 * time.Hour, Scale: 2}}})
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *core.ConfigError", err)
	}
	for _, want := range []string{
		`scale "cpu": target 3 is set without a signal`,
		"min 1.5 is outside (0, 1]",
		"step -1 is outside (0, 1]",
		"interval 1µs is below 1ms",
		"schedule[0] (25:00-25:00): no days",
		"start 25h0m0s is not a whole minute in [0, 24h)",
		"start and end are the same",
		"scale 2 is outside (0, 1]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !strings.HasPrefix(err.Error(), "quotagate: ") {
		t.Errorf("error %q does not start with quotagate: ", err)
	}
	if _, err := scale.New(scale.Config{}); err == nil || !strings.Contains(err.Error(), "needs a signal or a schedule") {
		t.Errorf("empty config: err = %v", err)
	}
	if _, err := scale.New(scale.Config{Signal: func() float64 { return 1 }}); err == nil || !strings.Contains(err.Error(), "positive target") {
		t.Errorf("a signal without a target: err = %v", err)
	}
	c := scale.MustNew(scale.Config{Signal: func() float64 { return 1 }, Target: 1})
	if c.Name() != "scale" || c.Scale() != 1 {
		t.Errorf("defaults: name %q, scale %v", c.Name(), c.Scale())
	}
}

// TestScaledBudget: a budget scaled by a Controller announces the
// scaled quota once the load lowers the scale.
func TestScaledBudget(t *testing.T) {
	clk := fakeclock.New(t0)
	load := 0.0
	c := scale.MustNew(scale.Config{Signal: func() float64 { return load }, Target: 1, Step: 0.5, Clock: clk})
	store := memstoreFor(t, clk)
	eng := core.MustNew(core.Config{Store: store, Clock: clk, Budgets: []core.Budget{{
		Name: "api", Quota: 10, Window: time.Minute, Scale: c,
		Key: func(r *core.Request) (string, error) { return r.RemoteAddr, nil },
	}}})
	l := eng.MustLayer(core.Use("api"))
	quota := func() int64 {
		var d core.Decision
		l.Decide(&core.Request{Method: "GET", Path: "/", RemoteAddr: "k"}, &d)
		defer d.Done(t.Context(), 200)
		return d.Results[0].Limit.Quota
	}
	if got := quota(); got != 10 {
		t.Errorf("unloaded: quota %d, want 10", got)
	}
	load = 4
	clk.Advance(time.Second)
	if got := quota(); got != 5 {
		t.Errorf("loaded, one step of 0.5: quota %d, want 5", got)
	}
}

func memstoreFor(t *testing.T, clk core.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: clk, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConcurrentCallers: goroutines calling Scale at once make one update
// per Interval between them.
func TestConcurrentCallers(t *testing.T) {
	clk := fakeclock.New(t0)
	var reads atomic.Int64
	c := scale.MustNew(scale.Config{Signal: func() float64 { reads.Add(1); return 2 }, Target: 1, Clock: clk})
	for range 20 {
		clk.Advance(time.Second)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					if f := c.Scale(); !(f > 0 && f <= 1) {
						t.Errorf("scale %v", f)
					}
				}
			})
		}
		wg.Wait()
	}
	if n := reads.Load(); n != 20 {
		t.Errorf("20 intervals: %d updates, want 20", n)
	}
	if f := c.Scale(); f != 0.25 {
		t.Errorf("a signal at twice the target whatever the scale: scale %v, want Min", f)
	}
}

// TestAnyStepMoves: a Step larger than the distance to the scale that
// would put the signal at Target still moves the scale, to that scale
// (not past it): the Deadband, not the Step, decides whether to move. A
// held signal of 0.9 against a target of 0.7 with a Step of 0.5 moved
// nothing when the Step was also the deadband.
func TestAnyStepMoves(t *testing.T) {
	clk := fakeclock.New(t0)
	c := scale.MustNew(scale.Config{Signal: func() float64 { return 0.9 }, Target: 0.7, Min: 0.25, Step: 0.5, Clock: clk})
	clk.Advance(time.Second)
	if f := c.Scale(); !near(f, round(0.7/0.9)) {
		t.Fatalf("first update: scale %v, want %v, the scale that puts the signal at target", f, round(0.7/0.9))
	}
	// A signal that stays at 0.9 whatever the scale wants ever less: the
	// scale falls at every update that finds it a Deadband off, to Min.
	prev := c.Scale()
	for i := range 30 {
		clk.Advance(time.Second)
		f := c.Scale()
		if f > prev {
			t.Fatalf("update %d: the scale rose from %v to %v under a held signal", i+2, prev, f)
		}
		prev = f
	}
	if prev != 0.25 {
		t.Errorf("a signal held at 0.9 whatever the scale, after 31 s: scale %v, want Min 0.25", prev)
	}
}

func round(f float64) float64 { return math.Round(f*1e12) / 1e12 }

// TestReaction: with the defaults, a load that the scale then governs
// (signal = demand × scale) and that wants half the quota brings the
// scale within a Deadband of 0.5 within 10 Intervals (5 s) from full
// scale, falling by at most a Step at each; a Deadband of its own lets a
// large Step get there in two Intervals.
func TestReaction(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    scale.Config
		within int
	}{
		{"defaults", scale.Config{Target: 0.7}, 10},
		{"step 0.3", scale.Config{Target: 0.7, Step: 0.3}, 2},
	} {
		p := &plant{demand: 140, capacity: 100} // wants 0.5
		s := newSim(t, c.cfg, p)
		got := s.run(30, scale.DefaultInterval)
		reached := slices.IndexFunc(got, func(f float64) bool { return math.Abs(f-0.5) <= 0.05+1e-9 })
		t.Logf("%s: %v", c.name, got[:12])
		if reached < 0 || reached+1 > c.within {
			t.Errorf("%s: within a deadband of 0.5 after %d intervals, want at most %d: %v", c.name, reached+1, c.within, got)
		}
		if f := got[len(got)-1]; math.Abs(f-0.5) > 0.05+1e-9 {
			t.Errorf("%s: settled at %v, want within a deadband of 0.5", c.name, f)
		}
		if reversals(got) != 0 {
			t.Errorf("%s: the scale overshot and came back: %v", c.name, got)
		}
	}
}

// TestThreshold: with Above, the scale is Above from the first update
// that reads the signal above Target, stays there while the signal is
// between Target × (1 − Deadband) and Target, and is 1 again once the
// signal reads below that.
func TestThreshold(t *testing.T) {
	clk := fakeclock.New(t0)
	v := 0.5
	c := scale.MustNew(scale.Config{Signal: func() float64 { return v }, Target: 0.8, Above: 0.5, Clock: clk})
	step := func(signal, want float64) {
		t.Helper()
		v = signal
		clk.Advance(time.Second)
		if f := c.Scale(); f != want {
			t.Fatalf("signal %v: scale %v, want %v", signal, f, want)
		}
	}
	step(0.5, 1)
	step(0.81, 0.5)
	step(0.79, 0.5)  // within the deadband below Target: held
	step(0.761, 0.5) // 0.8 × 0.95 = 0.76
	step(0.75, 1)
	step(0.9, 0.5)
	if _, err := scale.New(scale.Config{Target: 1, Above: 0.5}); err == nil || !strings.Contains(err.Error(), "above 0.5 is set without a signal") {
		t.Errorf("Above without a signal: err = %v", err)
	}
	if _, err := scale.New(scale.Config{Signal: func() float64 { return 0 }, Target: 1, Above: 1.5}); err == nil || !strings.Contains(err.Error(), "above 1.5 is outside (0, 1]") {
		t.Errorf("Above 1.5: err = %v", err)
	}
}

type fixedScale float64

func (f fixedScale) Scale() float64 { return float64(f) }

// TestLowest: Lowest is the lowest of its scalers, ignores factors that
// are not numbers or above 1, asks every scaler on every call (so a
// Controller among them keeps updating), and scales a budget as one
// Scaler.
func TestLowest(t *testing.T) {
	clk := fakeclock.New(t0)
	v := 0.0
	cpu := scale.MustNew(scale.Config{Signal: func() float64 { return v }, Target: 1, Above: 0.5, Clock: clk})
	mine := fixedScale(0.8)
	both := scale.Lowest(cpu, mine, fixedScale(math.NaN()), fixedScale(3))
	if f := both.Scale(); f != 0.8 {
		t.Fatalf("cpu 1, mine 0.8: Lowest %v, want 0.8", f)
	}
	v = 2
	clk.Advance(time.Second)
	if f := both.Scale(); f != 0.5 {
		t.Fatalf("cpu above target: Lowest %v, want 0.5 (the Controller updated through Lowest)", f)
	}
	if f := scale.Lowest().Scale(); f != 1 {
		t.Errorf("Lowest of none: %v, want 1", f)
	}

	store := memstore.MustNew(memstore.Config{Clock: clk})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Clock: clk, Budgets: []core.Budget{{
		Name: "b", Quota: 100, Window: time.Minute, Scale: both,
		Key: func(*core.Request) (string, error) { return "k", nil },
	}}})
	res, err := eng.Peek(context.Background(), "k")
	if err != nil || res[0].Limit.Quota != 50 {
		t.Errorf("budget of 100 under Lowest(0.5, 0.8): quota %d (err %v), want 50", res[0].Limit.Quota, err)
	}
}
