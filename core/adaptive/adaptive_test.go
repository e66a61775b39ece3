package adaptive_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
)

func TestConfigReportsEveryProblem(t *testing.T) {
	_, err := adaptive.New(adaptive.Config{
		Name: "api", Min: 10, Max: 5, Initial: 20, Tolerance: 0.5, Smoothing: 2,
		Samples: -1, Target: 3, NormalShare: 1.5, SheddableShare: -1, MaxRetryAfter: time.Millisecond,
	})
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *core.ConfigError", err)
	}
	for _, want := range []string{
		`adaptive "api": max 5 is below min 10`,
		"initial 20 is outside [min 10, max 5]",
		"tolerance 0.5 is below 1",
		"smoothing 2 is outside (0, 1]",
		"samples -1 is below 1",
		"target 3 is set without a signal",
		"normal share 1.5 is outside (0, 1]",
		"sheddable share -1 is outside",
		"max retry-after 1ms is below 1s",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := adaptive.New(adaptive.Config{Signal: func() float64 { return 1 }}); err == nil || !strings.Contains(err.Error(), "positive target") {
		t.Errorf("a signal without a target: err = %v", err)
	}
	l, err := adaptive.New(adaptive.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Limit != 4 || s.InFlight != 0 || l.Name() != "adaptive" {
		t.Errorf("defaults: %+v, name %q", s, l.Name())
	}
}

// admitN admits up to n requests of priority p and returns how many got
// in.
func admitN(l *adaptive.Limiter, p adaptive.Priority, n int) int {
	got, _ := admitTimed(l, p, n)
	return got
}

// admitTimed is admitN that also returns how many of the admitted
// requests the limiter asked to time.
func admitTimed(l *adaptive.Limiter, p adaptive.Priority, n int) (got, timed int) {
	r := &core.Request{Method: p.String()}
	for range n {
		ok, tm := l.Admit(r, nil)
		if ok {
			got++
		}
		if tm {
			timed++
		}
	}
	return got, timed
}

func byMethod(r *core.Request) adaptive.Priority {
	p, _ := adaptive.ParsePriority(r.Method)
	return p
}

func TestLowerPrioritiesUseAShareOfTheLimit(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Samples: 1 << 40, Priority: byMethod})
	// Sheddable requests stop at half the limit, normal ones at 90%, and
	// critical ones use it all.
	if got := admitN(l, adaptive.Sheddable, 20); got != 5 {
		t.Errorf("sheddable admitted %d, want 5", got)
	}
	if got := admitN(l, adaptive.Normal, 20); got != 4 {
		t.Errorf("normal admitted %d, want 4 (9 minus the 5 in flight)", got)
	}
	if got := admitN(l, adaptive.Critical, 20); got != 1 {
		t.Errorf("critical admitted %d, want 1", got)
	}
	s := l.Stats()
	if s.InFlight != 10 || s.Shed != [3]int64{19, 16, 15} {
		t.Errorf("stats = %+v, want 10 in flight, shed [19 16 15]", s)
	}
	var gs core.GuardState
	if ok, _ := l.Admit(&core.Request{Method: "sheddable"}, &gs); ok {
		t.Fatal("admitted beyond the limit")
	}
	if gs.Name != "adaptive" || gs.Limit != 5 || gs.InFlight != 10 || gs.Shed != 51 || gs.Priority != int(adaptive.Sheddable) || gs.RetryAfter != time.Second {
		t.Errorf("guard state of a shed request = %+v", gs)
	}
	for range 10 {
		l.Release(false, 0, 0)
	}
	if s := l.Stats(); s.InFlight != 0 || s.Limit != 10 {
		t.Errorf("after releases without samples: %+v, want 0 in flight and the limit unchanged", s)
	}
}

// queue models a handler that serves c requests at once in service time
// each and queues the rest: with n in flight, a request takes
// service × max(1, n/c).
func queue(n, c int, service time.Duration) time.Duration {
	return service * time.Duration(max(n, c)) / time.Duration(c)
}

// drive offers offered requests at once, step after step, releases the
// admitted ones with the model's latency, and returns the limits seen
// over the last half of the steps.
func drive(l *adaptive.Limiter, steps, offered, c int, service time.Duration) (lo, hi int64) {
	lo = 1 << 62
	for i := range steps {
		n, timed := admitTimed(l, adaptive.Critical, offered)
		lat := queue(n, c, service)
		for j := range n {
			if j < timed {
				l.Release(true, lat, 200)
			} else {
				l.Release(true, 0, 200) // not timed
			}
		}
		if i >= steps/2 {
			lim := l.Stats().Limit
			lo, hi = min(lo, lim), max(hi, lim)
		}
	}
	return lo, hi
}

func TestSettlesNearToleranceTimesCapacity(t *testing.T) {
	const c = 16
	l := adaptive.MustNew(adaptive.Config{Initial: 8, Samples: 20})
	lo, hi := drive(l, 4000, 3*c, c, 40*time.Millisecond)
	// Tolerance 1.25: the limit settles near 20, never starving the
	// handler (16) and never letting the queue grow much.
	if lo < c || hi > 23 {
		t.Errorf("limit ranged over [%d, %d], want within [%d, 23]", lo, hi, c)
	}
	s := l.Stats()
	if s.NoLoad != 40*time.Millisecond || s.Latency > 58*time.Millisecond || s.Signal > 1.45 {
		t.Errorf("stats = %+v: want no-load latency 40ms and mean latency within 1.45x (23/16)", s)
	}
	if s.Shed[adaptive.Critical] == 0 {
		t.Error("nothing was shed at 3x capacity")
	}
}

func TestLimitUnusedIsNotRaised(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 40, Samples: 10})
	// 5 at a time never reach half of 40: the limit stays.
	drive(l, 200, 5, 100, 10*time.Millisecond)
	if got := l.Stats().Limit; got != 40 {
		t.Errorf("limit = %d, want 40", got)
	}
}

func TestSlowerHandlerIsLearntAgain(t *testing.T) {
	const c = 10
	l := adaptive.MustNew(adaptive.Config{Initial: 5, Min: 2, Samples: 10})
	drive(l, 1000, 30, c, 10*time.Millisecond)
	if s := l.Stats(); s.NoLoad != 10*time.Millisecond {
		t.Fatalf("no-load latency = %v, want 10ms", s.NoLoad)
	}
	// The handler becomes 4x slower for good: the limit falls to Min, the
	// no-load latency is learnt again, and the limit recovers.
	lo, hi := drive(l, 3000, 30, c, 40*time.Millisecond)
	if s := l.Stats(); s.NoLoad != 40*time.Millisecond || lo < c || hi > 17 {
		t.Errorf("after the slowdown: %+v, limit over [%d, %d]; want no-load 40ms and a limit within [%d, 17]", s, lo, hi, c)
	}
}

func TestFollowsASuppliedSignal(t *testing.T) {
	var load atomic.Int64 // the signal: in flight times 10, say a CPU %
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Max: 200, Samples: 10, Target: 80,
		Signal: func() float64 { return float64(load.Load()) }})
	r := &core.Request{}
	for range 2000 {
		n := 0
		for range 100 {
			ok, timed := l.Admit(r, nil)
			if timed {
				t.Fatal("a limiter following a signal asked to time a request")
			}
			if ok {
				n++
			}
		}
		load.Store(int64(n * 10))
		for range n {
			l.Release(true, 0, 200)
		}
	}
	// Load 10 per request, target 80: the limit settles near 8.
	if s := l.Stats(); s.Limit < 6 || s.Limit > 9 || s.Signal < 60 || s.Signal > 90 {
		t.Errorf("stats = %+v, want a limit near 8 and the signal near 80", s)
	}
}

// TestSignalPanicReachesTheCallerOnly: a Signal that panics panics the
// Release that made the update, and the limiter goes on: the next batch
// updates from the signal again, and Stats answers.
func TestSignalPanicReachesTheCallerOnly(t *testing.T) {
	var calls atomic.Int32
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Max: 200, Samples: 10, Target: 80,
		Signal: func() float64 {
			if calls.Add(1) == 1 {
				panic("signal not ready")
			}
			return 0 // no load: the limit grows
		}})
	r := &core.Request{}
	batch := func() (admitted int) {
		for range 10 {
			if ok, _ := l.Admit(r, nil); ok {
				admitted++
			}
		}
		for i := range admitted {
			if i < admitted-1 {
				l.Release(true, 0, 200)
				continue
			}
			func() { // the batch's last release makes the update
				defer func() {
					if r := recover(); r != nil && r != "signal not ready" {
						t.Errorf("the update's release panicked with %v", r)
					}
				}()
				l.Release(true, 0, 200)
			}()
		}
		return admitted
	}
	if n := batch(); n != 10 || calls.Load() != 1 {
		t.Fatalf("first batch: %d admitted, signal read %d times; want 10 and 1 (the panic)", n, calls.Load())
	}
	batch()
	if calls.Load() != 2 {
		t.Fatalf("the batch after the panic read the signal %d times in all, want 2: the update's lock was left held", calls.Load())
	}
	if s := l.Stats(); s.Limit <= 10 {
		t.Errorf("after a batch at no load: %+v, want the limit above its initial 10", s)
	}
}

func TestConcurrentInFlightIsExact(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 8, Min: 4, Max: 64, Samples: 16, Priority: byMethod})
	var inside, over atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &core.Request{Method: adaptive.Priority(g % 3).String()}
			var s core.GuardState
			for i := range 2000 {
				if ok, _ := l.Admit(r, &s); !ok {
					continue
				}
				if n := inside.Add(1); n > 64 || s.InFlight > s.Limit || s.InFlight < 1 {
					over.Add(1)
				}
				if i%7 == 0 {
					time.Sleep(time.Microsecond)
				}
				inside.Add(-1)
				l.Release(i%5 != 0, time.Duration(1+i%3)*time.Millisecond, 200)
				if f := l.Stats().InFlight; f < 0 {
					over.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if over.Load() != 0 {
		t.Errorf("%d admissions above the limit or negative counts", over.Load())
	}
	if s := l.Stats(); s.InFlight != 0 || s.Limit < 4 || s.Limit > 64 {
		t.Errorf("after the run: %+v, want 0 in flight and the limit within [4, 64]", s)
	}
}

func TestParsePriority(t *testing.T) {
	for p := adaptive.Critical; p <= adaptive.Sheddable; p++ {
		if q, err := adaptive.ParsePriority(p.String()); err != nil || q != p {
			t.Errorf("ParsePriority(%q) = %v, %v", p.String(), q, err)
		}
	}
	if _, err := adaptive.ParsePriority("urgent"); err == nil || !strings.HasPrefix(err.Error(), "quotagate: ") {
		t.Errorf("ParsePriority(urgent) err = %v", err)
	}
	if got := adaptive.Priority(7).String(); got != "Priority(7)" {
		t.Errorf("String = %q", got)
	}
}

// release admits and releases one request of priority p with latency
// lat and status, timing it whatever the limiter's choice.
func release(l *adaptive.Limiter, p adaptive.Priority, lat time.Duration, status int) bool {
	ok, _ := l.Admit(&core.Request{Method: p.String()}, nil)
	if ok {
		l.Release(true, lat, status)
	}
	return ok
}

func TestErrorsAreNotSamples(t *testing.T) {
	// A layer that reports no status releases every request with 0: each
	// is a sample.
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Samples: 1, SampleEvery: 1})
	release(l, adaptive.Critical, 40*time.Millisecond, 0)
	if s := l.Stats(); s.Latency != 40*time.Millisecond {
		t.Errorf("after a release without status: %+v, want a 40ms sample", s)
	}
	// A layer that reports statuses: errors and upgrades are not samples,
	// and once a status was seen, a release without one is a panic.
	l = adaptive.MustNew(adaptive.Config{Initial: 10, Samples: 1, SampleEvery: 1})
	for _, status := range []int{500, 503, 101} {
		release(l, adaptive.Critical, time.Microsecond, status)
	}
	if s := l.Stats(); s.Latency != 0 || s.NoLoad != 0 {
		t.Fatalf("after errors: %+v, want no sample", s)
	}
	release(l, adaptive.Critical, 40*time.Millisecond, 404)
	if s := l.Stats(); s.Latency != 40*time.Millisecond {
		t.Errorf("after a 404: %+v, want a 40ms sample", s)
	}
	release(l, adaptive.Critical, 50*time.Millisecond, 0)
	if s := l.Stats(); s.Latency != 40*time.Millisecond {
		t.Errorf("after a panic: %+v, want no sample", s)
	}
}

// A burst of fast requests that leave while slow ones are in flight is
// not a batch: the update waits for the slow ones, and learns their
// latency, not the burst's (up to 8 × Samples samples: see the next
// test).
func TestFastBurstAroundSlowRequestsIsNotABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := adaptive.MustNew(adaptive.Config{Initial: 20, Samples: 10, SampleEvery: 1})
		r := &core.Request{}
		for range 6 { // slow requests enter
			if ok, _ := l.Admit(r, nil); !ok {
				t.Fatal("shed")
			}
		}
		start := time.Now()
		for range 70 {
			time.Sleep(500 * time.Microsecond)
			release(l, adaptive.Critical, 2*time.Microsecond, 404)
		}
		if s := l.Stats(); s.NoLoad != 0 {
			t.Fatalf("the burst made an update: %+v", s)
		}
		time.Sleep(40*time.Millisecond - time.Since(start))
		for range 6 {
			l.Release(true, 40*time.Millisecond, 200)
		}
		for range 10 {
			release(l, adaptive.Critical, 40*time.Millisecond, 200)
		}
		if s := l.Stats(); s.NoLoad < 30*time.Millisecond || s.Limit != 20 {
			t.Errorf("after the slow requests left: %+v, want a no-load latency near 40ms and the limit kept", s)
		}
	})
}

// Requests in flight that are not samples (slow errors) do not hold the
// controller up for good: a batch of 8 × Samples samples is ready.
func TestSlowErrorsInFlightDoNotFreezeTheController(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := adaptive.MustNew(adaptive.Config{Initial: 20, Samples: 10, SampleEvery: 1})
		r := &core.Request{}
		for range 10 { // requests that will fail slowly
			if ok, _ := l.Admit(r, nil); !ok {
				t.Fatal("shed")
			}
		}
		for i := range 80 {
			if s := l.Stats(); s.NoLoad != 0 {
				t.Fatalf("an update after %d samples, with 10 slow requests in flight: %+v", i, s)
			}
			time.Sleep(10 * time.Millisecond)
			release(l, adaptive.Critical, time.Millisecond, 200)
		}
		if s := l.Stats(); s.NoLoad != time.Millisecond {
			t.Errorf("after 80 samples: %+v, want an update with the samples' 1ms", s)
		}
		for range 10 {
			l.Release(true, 5*time.Second, 504)
		}
	})
}

// One low first batch does not decide the no-load latency: it is the
// median of the first three updates' means, and then goes down only to
// the median of the latest three.
func TestNoLoadLatencyIsAMedian(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Samples: 10, SampleEvery: 1})
	batch := func(lat time.Duration) { // as many samples as make a batch
		n := max(10, int((10*l.Stats().NoLoad+lat-1)/lat))
		for range n {
			release(l, adaptive.Critical, lat, 200)
		}
	}
	for i, c := range []struct {
		lat, noLoad time.Duration
	}{
		{30 * time.Millisecond, 30 * time.Millisecond}, // the first batch
		{40 * time.Millisecond, 40 * time.Millisecond}, // the larger of two
		{40 * time.Millisecond, 40 * time.Millisecond}, // the median of three
		{30 * time.Millisecond, 40 * time.Millisecond}, // one low batch
		{40 * time.Millisecond, 40 * time.Millisecond},
		{35 * time.Millisecond, 35 * time.Millisecond}, // confirmed: 30, 40, 35
	} {
		batch(c.lat)
		if s := l.Stats(); s.NoLoad != c.noLoad {
			t.Errorf("after batch %d of %v: no-load latency %v, want %v", i, c.lat, s.NoLoad, c.noLoad)
		}
	}
}

// A latency that rose while the requests hardly overlapped is not theirs
// to fix: a lower limit would not bring it down, so it is not lowered.
func TestLatencyWithoutOverlapKeepsTheLimit(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Min: 2, Samples: 10, SampleEvery: 1})
	for range 30 { // one at a time
		release(l, adaptive.Critical, 40*time.Millisecond, 200)
	}
	for range 100 {
		release(l, adaptive.Critical, 100*time.Millisecond, 200)
	}
	if s := l.Stats(); s.Limit != 10 || s.Latency != 100*time.Millisecond {
		t.Errorf("after slower requests one at a time: %+v, want the limit kept at 10", s)
	}
}

// One very slow request (a slow client) holds a batch open until it has
// 8 × Samples samples; queueing cannot explain its mean, so it holds the
// limit, and is never learnt as the no-load latency.
func TestOneSlowRequestIsNotLearnt(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Min: 2, Samples: 10, SampleEvery: 1})
	batch := func(slow time.Duration) {
		for range 10 { // ten at a time: they overlap
			admitN(l, adaptive.Critical, 10)
			if slow > 0 {
				l.Release(true, slow, 200)
				slow = 0
			} else {
				l.Release(true, 40*time.Millisecond, 200)
			}
			for range 9 {
				l.Release(true, 40*time.Millisecond, 200)
			}
		}
	}
	for range 4 {
		batch(0)
	}
	before := l.Stats()
	for range 3 {
		batch(30 * time.Second)
	}
	if s := l.Stats(); s.NoLoad != before.NoLoad || s.Limit != before.Limit {
		t.Errorf("after a 30s request in each of three batches: %+v, want no-load latency and limit kept: %+v", s, before)
	}
}

// Once the no-load latency is known, fast requests alone make no update
// until they add up to Samples × the no-load latency.
func TestFastRequestsAloneDoNotMoveTheController(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Min: 2, Samples: 10, SampleEvery: 1})
	for range 30 {
		release(l, adaptive.Critical, 40*time.Millisecond, 200)
	}
	before := l.Stats()
	for range 10000 { // 20ms in all, against 400ms
		release(l, adaptive.Critical, 2*time.Microsecond, 404)
	}
	if s := l.Stats(); s.NoLoad != 40*time.Millisecond || s.Limit != before.Limit || s.Latency != before.Latency {
		t.Errorf("after fast requests alone: %+v, want the state before them: %+v", s, before)
	}
}

// A no-load latency learnt from fast requests only (a storm of errors on
// a layer that reports no status) is learnt again when the guarded work
// returns: its latency cannot be queueing. The limit is held meanwhile.
func TestSlowTrafficAfterFastIsLearntAgain(t *testing.T) {
	l := adaptive.MustNew(adaptive.Config{Initial: 10, Min: 2, Samples: 10, SampleEvery: 1})
	for range 100 {
		release(l, adaptive.Critical, 2*time.Microsecond, 0)
	}
	if s := l.Stats(); s.NoLoad != 2*time.Microsecond {
		t.Fatalf("no-load latency %v, want 2µs", s.NoLoad)
	}
	for range 20 {
		release(l, adaptive.Critical, 40*time.Millisecond, 200)
	}
	if s := l.Stats(); s.NoLoad != 40*time.Millisecond || s.Limit < 10 {
		t.Errorf("after 20 slow samples: %+v, want the no-load latency learnt again (40ms) and the limit kept", s)
	}
}

// Traffic of one priority uses the limit when it fills half of what that
// priority may use: Normal traffic grows the limit from Min 2 (Normal
// may use 1 of 2 and of 3), and Sheddable traffic alone grows it too.
func TestOnePriorityGrowsTheLimit(t *testing.T) {
	for _, p := range []adaptive.Priority{adaptive.Normal, adaptive.Sheddable} {
		l := adaptive.MustNew(adaptive.Config{Initial: 2, Min: 2, Samples: 10, SampleEvery: 1, Priority: byMethod})
		for range 150 {
			// as many requests as the priority may use, all served with
			// the same latency: the handler is far from busy
			n := admitN(l, p, 1000)
			for range n {
				l.Release(true, 40*time.Millisecond, 200)
			}
		}
		if s := l.Stats(); s.Limit < 20 {
			t.Errorf("%v traffic: limit %d after 150 rounds without queueing, want it grown past 20", p, s.Limit)
		}
	}
}
