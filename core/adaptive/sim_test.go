package adaptive_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
)

// This file simulates a guarded service under testing/synctest's fake
// clock: the limiter runs as it does behind a layer (Admit, then Release
// with the latency of a timed request and the response status), in front
// of a handler that serves capacity requests at once, each for a service
// time drawn evenly from ±25% around its mean, and queues the rest.
// Clients arrive open loop (Poisson). Time is fake, so a run of seconds
// takes a moment, scheduler noise plays no part, and the outcome depends
// only on the seeds and on the limiter's own random choice of the
// requests it times.

// stream is one kind of client traffic.
type stream struct {
	Name     string
	From, To time.Duration // arrivals in [From, To) since the run started
	Rate     float64       // arrivals per second
	Priority adaptive.Priority
	// Cheap requests do not use the handler's capacity: they spend 2µs
	// in the handler and are answered with Status (404, 500, or 0 for a
	// panic, which a layer releases with status 0).
	Cheap  bool
	Status int
	// Latency is a cheap request's time in the handler; default 2µs, and
	// for 1 request in 100, 0.5-5ms more, as when the scheduler runs
	// something else for a while on a busy machine.
	Latency time.Duration
	// Period, if set, makes the stream send only in the first half of
	// every Period.
	Period time.Duration
	// Clients, if set, makes the stream closed loop: that many clients,
	// each sending its next request when the last one is answered, and
	// waiting Backoff first when it was shed. Rate is then unused.
	Clients int
	Backoff time.Duration
}

// simulation is a service, the clients, and the window of arrivals that
// the tally counts.
type simulation struct {
	Capacity int
	Service  time.Duration
	Streams  []stream
	From, To time.Duration // the measured arrivals
	// NoStatus releases every request with status 0, as a layer without
	// core.CountWhen does: the limiter learns no status.
	NoStatus bool
	Seed     uint64
}

// tally is what one stream's measured arrivals got.
type tally struct {
	Arrived, Served, Shed int
	Latencies             []time.Duration // of served requests, sorted
	Done                  int             // served requests that completed within [From, To)
	Completed             int             // served requests of any arrival that completed within [From, To)
}

func (t *tally) served() float64 { return float64(t.Served) / float64(max(1, t.Arrived)) }
func (t *tally) shed() float64   { return float64(t.Shed) / float64(max(1, t.Arrived)) }

// p99 returns the 99th percentile latency of the served requests.
func (t *tally) p99() time.Duration {
	if len(t.Latencies) == 0 {
		return 0
	}
	return t.Latencies[min(len(t.Latencies)-1, int(float64(len(t.Latencies))*0.99))]
}

// simOutcome is the tallies by stream name, and the range of the limit
// while the measured arrivals came.
type simOutcome struct {
	By             map[string]*tally
	LimLo, LimHi   int64
	Final          adaptive.Stats
	limited        bool
	capacityPerSec float64
}

// run runs the simulation behind lim (none if nil) in a synctest bubble.
func (s simulation) run(t *testing.T, lim *adaptive.Limiter) simOutcome {
	t.Helper()
	return s.runTraced(t, lim, nil)
}

func (s simulation) runTraced(t *testing.T, lim *adaptive.Limiter, trace func(time.Duration, adaptive.Stats)) simOutcome {
	t.Helper()
	out := simOutcome{By: map[string]*tally{}, LimLo: 1 << 62, limited: lim != nil,
		capacityPerSec: float64(s.Capacity) / s.Service.Seconds()}
	for _, st := range s.Streams {
		out.By[st.Name] = &tally{}
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		slots := make(chan struct{}, s.Capacity)
		var mu sync.Mutex
		var wg sync.WaitGroup
		record := func(st *stream, at time.Duration, ok bool, lat time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			tl := out.By[st.Name]
			if done := at + lat; ok && done >= s.From && done < s.To {
				tl.Completed++
			}
			if at < s.From || at >= s.To {
				return
			}
			tl.Arrived++
			if !ok {
				tl.Shed++
				return
			}
			tl.Served++
			tl.Latencies = append(tl.Latencies, lat)
			if done := at + lat; done < s.To {
				tl.Done++
			}
		}
		request := func(st *stream, at, service time.Duration, hiccup time.Duration) (served bool) {
			defer wg.Done()
			r := &core.Request{Method: st.Priority.String()}
			ok, timed := true, false
			if lim != nil {
				ok, timed = lim.Admit(r, nil)
			}
			if !ok {
				record(st, at, false, 0)
				return false
			}
			t0 := time.Now()
			status := 200
			if st.Cheap {
				time.Sleep(cmp.Or(st.Latency, 2*time.Microsecond) + hiccup)
				status = st.Status
			} else {
				slots <- struct{}{}
				time.Sleep(service)
				<-slots
			}
			lat := time.Since(t0)
			if lim != nil {
				if s.NoStatus {
					status = 0
				}
				var sample time.Duration
				if timed {
					sample = lat
				}
				lim.Release(true, sample, status)
			}
			record(st, at, true, lat)
			return true
		}
		for i := range s.Streams {
			st := &s.Streams[i]
			for c := range st.Clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(s.Seed, uint64(i)<<32|uint64(c)))
					// Clients start spread over the first service time.
					time.Sleep(st.From - time.Since(start) + time.Duration(rng.Float64()*float64(s.Service)))
					for {
						at := time.Since(start)
						if at >= st.To {
							return
						}
						service := time.Duration(float64(s.Service) * (0.75 + 0.5*rng.Float64()))
						wg.Add(1)
						if !request(st, at, service, 0) {
							time.Sleep(st.Backoff)
						}
					}
				}()
			}
			if st.Clients > 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(s.Seed, uint64(i)))
				at := st.From
				for {
					at += time.Duration(rng.ExpFloat64() / st.Rate * float64(time.Second))
					if at >= st.To {
						return
					}
					if st.Period > 0 && (at-st.From)%st.Period >= st.Period/2 {
						continue
					}
					service := time.Duration(float64(s.Service) * (0.75 + 0.5*rng.Float64()))
					var hiccup time.Duration
					if rng.IntN(100) == 0 {
						hiccup = time.Duration(float64(500*time.Microsecond) * (1 + 9*rng.Float64()))
					}
					time.Sleep(at - time.Since(start))
					wg.Add(1)
					go request(st, at, service, hiccup)
				}
			}()
		}
		if lim != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for at := time.Duration(0); at < s.To; at += 50 * time.Millisecond {
					time.Sleep(at - time.Since(start))
					if trace != nil {
						trace(at, lim.Stats())
					}
					if at >= s.From {
						l := lim.Stats().Limit
						out.LimLo, out.LimHi = min(out.LimLo, l), max(out.LimHi, l)
					}
				}
			}()
		}
		wg.Wait()
		if lim != nil {
			out.Final = lim.Stats()
		}
	})
	for _, tl := range out.By {
		slices.Sort(tl.Latencies)
	}
	return out
}

// row formats one stream's outcome for a table.
func (o simOutcome) row(name string) string {
	tl := o.By[name]
	lim := "no limit"
	if o.limited {
		lim = fmt.Sprintf("%d..%d", o.LimLo, o.LimHi)
	}
	return fmt.Sprintf("served %5.1f%%  shed %5.1f%%  p99 %-8v limit %-8s no-load %v", 100*tl.served(), 100*tl.shed(),
		tl.p99().Round(time.Millisecond), lim, o.Final.NoLoad.Round(time.Microsecond))
}

// Coarse numbers, so that the outcome does not hang on one request: a
// handler serving 8 requests at once in 50ms ± 25%, a capacity of 160
// requests a second, and a limit starting at half of it.
const (
	simC       = 8
	simService = 50 * time.Millisecond
	simRate    = simC / 0.05 // capacity, requests per second
)

func simLimiter() *adaptive.Limiter {
	return adaptive.MustNew(adaptive.Config{Initial: simC / 2, Min: 2, Max: 1000, Priority: byMethod})
}

// attack is the guarded route at 0.8× its capacity for 10s and, from 2s
// on, cheap requests (answered with statuses in turn) at ratio times its
// rate; the tally counts the route's arrivals from 2s on.
func attack(ratio float64, statuses ...int) simulation {
	s := simulation{Capacity: simC, Service: simService, From: 2 * time.Second, To: 10 * time.Second,
		Streams: []stream{{Name: "work", To: 10 * time.Second, Rate: 0.8 * simRate}}}
	for i, st := range statuses {
		s.Streams = append(s.Streams, stream{Name: fmt.Sprintf("cheap%d", i), From: 2 * time.Second, To: 10 * time.Second,
			Rate: ratio * 0.8 * simRate / float64(len(statuses)), Cheap: true, Status: st})
	}
	return s
}

// with returns s changed by f.
func (s simulation) with(f func(*simulation)) simulation {
	f(&s)
	return s
}

// storm is 5s of fast 500s and panics at 10× the guarded route's rate,
// then the route alone at 0.8× its capacity for 10s; the tally counts
// the 5s from after on after the storm. On a warm limiter, the route ran
// at 0.8× for 5s before the storm.
func storm(warm, noStatus bool, after time.Duration) simulation {
	rate := 10 * 0.8 * simRate / 2
	s := simulation{Capacity: simC, Service: simService, NoStatus: noStatus}
	at := time.Duration(0)
	if warm {
		s.Streams = append(s.Streams, stream{Name: "before", To: 5 * time.Second, Rate: 0.8 * simRate})
		at = 5 * time.Second
	}
	end := at + 5*time.Second
	s.Streams = append(s.Streams,
		stream{Name: "500s", From: at, To: end, Rate: rate, Cheap: true, Status: 500},
		stream{Name: "panics", From: at, To: end, Rate: rate, Cheap: true, Status: 0},
		stream{Name: "work", From: end, To: end + 10*time.Second, Rate: 0.8 * simRate})
	s.From, s.To = end+after, end+after+5*time.Second
	return s
}

// only is one stream of priority p at load × capacity from 0 to to, its
// arrivals in [from, to) counted.
func only(p adaptive.Priority, load float64, from, to time.Duration) simulation {
	return simulation{Capacity: simC, Service: simService, From: from, To: to,
		Streams: []stream{{Name: "work", To: to, Rate: load * simRate, Priority: p}}}
}

// A client sending cheap requests next to the guarded route, at up to
// 10× its rate, does not take its service away: the route at 0.8× its
// capacity keeps at least 85% of its requests served.
func TestCheapRequestsDoNotSteerTheLimit(t *testing.T) {
	for _, c := range []struct {
		name string
		sim  simulation
	}{
		{"404s at 10x", attack(10, 404)},
		{"404s, 500s and panics at 10x", attack(10, 404, 500, 0)},
		{"404s, 500s and panics at 10x, no statuses", attack(10, 404, 500, 0).with(func(s *simulation) { s.NoStatus = true })},
		{"404s at 10x from the start", attack(10, 404).with(func(s *simulation) { s.Streams[1].From = 0 })},
		{"404s at 10x, on and off each second", attack(10, 404).with(func(s *simulation) { s.Streams[1].Period = 2 * time.Second })},
		{"1ms 200s at 10x", attack(10, 200).with(func(s *simulation) { s.Streams[1].Latency = time.Millisecond })},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.sim.run(t, simLimiter())
			t.Log(o.row("work"))
			if got := o.By["work"].served(); got < 0.85 {
				t.Errorf("the guarded route got %.1f%% of its requests served, want at least 85%%", 100*got)
			}
		})
	}
}

// After 5s of fast 500s and panics, the guarded route at 0.8× its
// capacity is served again: at once on a limiter that had learnt it,
// within 5s on a new one.
func TestErrorStormDoesNotPinTheLimit(t *testing.T) {
	for _, c := range []struct {
		name string
		sim  simulation
	}{
		{"warm, first 5s after", storm(true, false, 0)},
		{"warm, no statuses, first 5s after", storm(true, true, 0)},
		{"new, 5s to 10s after", storm(false, false, 5*time.Second)},
		{"new, no statuses, 5s to 10s after", storm(false, true, 5*time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.sim.run(t, simLimiter())
			t.Log(o.row("work"))
			if got := o.By["work"].served(); got < 0.85 {
				t.Errorf("the route got %.1f%% of its requests served after the storm, want at least 85%%", 100*got)
			}
		})
	}
}

// Sheddable traffic alone raises the limit: it may use half of it, and
// that half is what it must fill for the limit to rise.
func TestSheddableTrafficRaisesTheLimit(t *testing.T) {
	for _, load := range []float64{0.5, 0.7} {
		t.Run(fmt.Sprintf("%.1fx", load), func(t *testing.T) {
			o := only(adaptive.Sheddable, load, 10*time.Second, 20*time.Second).run(t, simLimiter())
			t.Log(o.row("work"))
			if got := o.By["work"].served(); got < 0.95 {
				t.Errorf("sheddable traffic at %.1fx capacity: %.1f%% served from 10s on, want at least 95%%", load, 100*got)
			}
		})
	}
}

// At 1.5× its capacity, the handler behind the limit serves at least 90%
// of its capacity, with a p99 latency within twice the unloaded one.
func TestOverloadIsShedAtCapacity(t *testing.T) {
	unloaded := only(adaptive.Critical, 0.5, 2*time.Second, 12*time.Second).run(t, nil)
	o := only(adaptive.Critical, 1.5, 2*time.Second, 12*time.Second).run(t, simLimiter())
	work := o.By["work"]
	share := float64(work.Done) / 10 / simRate
	t.Logf("%s, %.0f%% of capacity; unloaded p99 %v", o.row("work"), 100*share, unloaded.By["work"].p99())
	if share < 0.9 {
		t.Errorf("served %.0f%% of capacity, want at least 90%%", 100*share)
	}
	if p99, max := work.p99(), 2*unloaded.By["work"].p99(); p99 > max {
		t.Errorf("p99 %v, want at most %v, twice the unloaded p99", p99, max)
	}
}
