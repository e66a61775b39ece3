// Command scaled shows per-client quotas that follow the load (package
// core/scale): a service whose work queue grows past a target lowers
// every client's quota until the queue holds, and raises it again when
// the load ends.
//
// The service does its work on a pool of -workers goroutines, each job
// taking -service, and queues the jobs waiting for a worker in a queue of
// -queue places; a request that finds the queue full is answered 503. Each
// client has a token bucket of -quota requests a second (its burst as
// large), scaled by a core/scale Controller whose signal is the queue's
// mean depth since its last update and whose target is -target jobs
// waiting. The clients are paced: each is a pacer.Transport (package
// nethttp/pacer) with a few requests in flight, which sends while the
// RateLimit fields say its quota has room and waits for the reset when
// they say it has none.
//
// The run has three phases: a few clients, whose quotas add up to less
// than the service can do; then more clients join, one at a time, until
// their quotas add up to more than twice its capacity; then most leave.
// The table gives, per phase, the scale and the quota the
// RateLimit-Policy field announced (at the end of the phase, and the
// lowest), the attempts the clients sent and those served (attempts still
// in flight when a phase ends are served after it), the 429s and 503s the
// attempts met on the wire, the requests that failed (ended without a
// 200 once their pacer gave up retrying), and the median time a job
// waited in the queue.
//
//	go run ./examples/scaled
//	go run ./examples/scaled -compare   # and again with quotas that do not scale
//
// One run (go run ./examples/scaled, 2 cores shared with another build):
//
//	phase                   clients  scale (lowest)  quota q= (lowest)  sent  served  429  503  failed  p50 queue wait
//	calm                    4        1.00 (1.00)     20 (20)            256   256     0    0    0       21ms
//	load: clients join      4 → 24   0.40 (0.20)     8 (4)              1348  1309    1    0    0       62ms
//	after: most clients go  3        1.00 (0.20)     20 (4)             206   206     0    0    0       2ms
//
// During the load the queue grows past its target and the controller
// lowers the scale a step at a time; every client is told its smaller
// quota in the fields and slows down, and no request fails. The clients
// can have 48 attempts out at once against 44 places (queue and workers),
// so on a machine busy enough to hold the scale at its Min a burst can
// still find the queue full; its pacer waits and sends it again. An attempt can meet a 429 when the scale falls between
// the answer that told its client what it had left and the attempt that
// spends the last of it (a step may take a step's worth of that); its
// pacer waits the Retry-After and sends it again, as the run's one 429
// shows. Once the load ends the scale climbs back to 1 and the full quota
// is announced again. With -compare, the same load without scaling fills
// the queue: attempts are turned away with 503 and the queue wait grows
// several times.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/scale"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/nethttp"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

func main() {
	p := defaults()
	flag.IntVar(&p.Workers, "workers", p.Workers, "jobs the service does at once")
	flag.DurationVar(&p.Service, "service", p.Service, "time one job takes")
	flag.IntVar(&p.Queue, "queue", p.Queue, "jobs that may wait for a worker; more are answered 503")
	flag.Int64Var(&p.Quota, "quota", p.Quota, "requests a second each client may send at full scale")
	flag.Float64Var(&p.Target, "target", p.Target, "the queue's depth the scale keeps it at")
	flag.IntVar(&p.Peak, "clients", p.Peak, "clients at the height of the load")
	flag.DurationVar(&p.Calm, "calm", p.Calm, "length of the calm phase")
	flag.DurationVar(&p.Load, "load", p.Load, "length of the load phase")
	flag.DurationVar(&p.After, "after", p.After, "length of the phase after the load")
	compare := flag.Bool("compare", false, "run the same phases again with quotas that do not scale")
	flag.Parse()
	res, err := run(p)
	if err != nil {
		log.Fatal(err)
	}
	res.print(os.Stdout)
	if *compare {
		p.Unscaled = true
		if res, err = run(p); err != nil {
			log.Fatal(err)
		}
		fmt.Println("\nThe same, with quotas that do not scale:")
		res.print(os.Stdout)
	}
}

// params sets up a demonstration.
type params struct {
	Workers  int           // jobs done at once
	Service  time.Duration // time one job takes
	Queue    int           // places in the queue
	Quota    int64         // each client's requests a second at full scale
	Target   float64       // the queue depth to keep
	Step     float64       // the controller's step
	Interval time.Duration // the controller's interval
	InFlight int           // requests each client keeps in flight
	Few      int           // clients in the calm phase
	Peak     int           // clients at the height of the load
	Last     int           // clients after the load
	Calm     time.Duration
	Load     time.Duration
	After    time.Duration
	Unscaled bool // the budget has no Scale, for comparison
}

func defaults() params {
	return params{
		Workers: 4, Service: 20 * time.Millisecond, Queue: 40,
		Quota: 20, Target: 4, Step: 0.1, Interval: 200 * time.Millisecond,
		InFlight: 2, Few: 4, Peak: 24, Last: 3,
		Calm: 3 * time.Second, Load: 10 * time.Second, After: 5 * time.Second,
	}
}

// capacity is the service's jobs a second.
func (p params) capacity() float64 { return float64(p.Workers) / p.Service.Seconds() }

// phaseRow is one line of the table.
type phaseRow struct {
	Name                 string
	Clients              string
	Scale, LowestScale   float64 // at the end of the phase, and the lowest seen
	Falls                int     // Steps the scale fell, summed over its samples
	Quota, LowestQuota   int64   // q= announced last, and the lowest
	Sent, Served         int64   // attempts on the wire, 200s
	TooMany, Unavailable int64   // 429s, 503s on the wire
	Failed               int64   // requests that ended without a 200
	Wait                 time.Duration
}

// results are the rows of the three phases.
type results struct {
	Calm, Load, After phaseRow
	Capacity          float64
}

func (r *results) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tclients\tscale (lowest)\tquota q= (lowest)\tsent\tserved\t429\t503\tfailed\tp50 queue wait")
	for _, row := range []phaseRow{r.Calm, r.Load, r.After} {
		fmt.Fprintf(tw, "%s\t%s\t%.2f (%.2f)\t%d (%d)\t%d\t%d\t%d\t%d\t%d\t%v\n", row.Name, row.Clients,
			row.Scale, row.LowestScale, row.Quota, row.LowestQuota, row.Sent, row.Served, row.TooMany, row.Unavailable, row.Failed, row.Wait)
	}
	tw.Flush()
}

// service is a worker pool with a bounded queue. depth is the number of
// jobs waiting, integrated over time for the controller's signal.
type service struct {
	p     params
	queue chan job

	mu    sync.Mutex
	depth int             // jobs waiting now
	area  float64         // ∫ depth dt since mark, in job·seconds
	last  time.Time       // when depth last changed
	mark  time.Time       // when the signal was last read
	waits []time.Duration // of the jobs started since the last drain
}

type job struct {
	queued time.Time
	done   chan struct{}
}

func newService(p params) *service {
	now := time.Now()
	s := &service{p: p, queue: make(chan job, p.Queue), last: now, mark: now}
	for range p.Workers {
		go s.work()
	}
	return s
}

// change adds d to the depth, integrating the old depth up to now. The
// caller holds mu.
func (s *service) change(d int, now time.Time) {
	s.area += float64(s.depth) * now.Sub(s.last).Seconds()
	s.depth += d
	s.last = now
}

// Depth is the controller's signal: the queue's mean depth since the last
// call. It is quick and safe for concurrent use, as core/scale asks.
func (s *service) Depth() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.change(0, now)
	mean := float64(s.depth)
	if dt := now.Sub(s.mark).Seconds(); dt > 0 {
		mean = s.area / dt
	}
	s.area, s.mark = 0, now
	return mean
}

func (s *service) work() {
	for j := range s.queue {
		s.mu.Lock()
		now := time.Now()
		s.change(-1, now)
		s.waits = append(s.waits, now.Sub(j.queued))
		s.mu.Unlock()
		time.Sleep(s.p.Service)
		close(j.done)
	}
}

// drainWaits returns the queue waits of the jobs started since the last
// call.
func (s *service) drainWaits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waits
	s.waits = nil
	return w
}

// ServeHTTP queues a job and answers when it is done, or 503 when the
// queue is full.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	j := job{queued: time.Now(), done: make(chan struct{})}
	s.mu.Lock()
	select {
	case s.queue <- j:
		s.change(1, j.queued)
		s.mu.Unlock()
	default:
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the queue is full", http.StatusServiceUnavailable)
		return
	}
	<-j.done
	_, _ = io.WriteString(w, "done\n")
}

// tally is what every client's attempts got.
type tally struct {
	sent, served, tooMany, unavailable atomic.Int64
	failed                             atomic.Int64 // requests that ended without a 200, retries spent
	mu                                 sync.Mutex
	lowestQuota, lastQuota             int64
}

func (t *tally) quota(q int64) {
	t.mu.Lock()
	t.lastQuota = q
	if t.lowestQuota == 0 || q < t.lowestQuota {
		t.lowestQuota = q
	}
	t.mu.Unlock()
}

// counting is the pacer's base transport: it counts every attempt on the
// wire and the quota the response announced.
type counting struct {
	base http.RoundTripper
	t    *atomic.Pointer[tally]
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	t := c.t.Load()
	t.sent.Add(1)
	res, err := c.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	switch res.StatusCode {
	case http.StatusOK:
		t.served.Add(1)
	case http.StatusTooManyRequests:
		t.tooMany.Add(1)
	case http.StatusServiceUnavailable:
		t.unavailable.Add(1)
	}
	if q, ok := announcedQuota(res.Header.Get(core.HeaderPolicy)); ok {
		t.quota(q)
	}
	return res, nil
}

// announcedQuota reads q from a RateLimit-Policy field of one member,
// "per_client";q=20;w=1.
func announcedQuota(policy string) (int64, bool) {
	_, rest, ok := strings.Cut(policy, ";q=")
	if !ok {
		return 0, false
	}
	if i := strings.IndexByte(rest, ';'); i >= 0 {
		rest = rest[:i]
	}
	q, err := strconv.ParseInt(rest, 10, 64)
	return q, err == nil
}

// run serves the service behind a scaled per-client budget and drives it
// through the three phases.
func run(p params) (*results, error) {
	svc := newService(p)
	defer close(svc.queue)
	ctl, err := scale.New(scale.Config{
		Name:     "queue",
		Signal:   svc.Depth,
		Target:   p.Target,
		Min:      0.2,
		Step:     p.Step,
		Interval: p.Interval,
	})
	if err != nil {
		return nil, err
	}
	var scaler core.Scaler = ctl
	if p.Unscaled {
		scaler = nil
	}
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng, err := core.New(core.Config{Store: store, Budgets: []core.Budget{{
		Name: "per_client", Algorithm: core.TokenBucket, Quota: p.Quota, Window: time.Second,
		Key: func(r *core.Request) (string, error) {
			if c := r.Header.Get("X-Client"); c != "" {
				return c, nil
			}
			return "", core.ErrNoKey
		},
		KeyClass: "client",
		Scale:    scaler,
	}}})
	if err != nil {
		return nil, err
	}
	mw, err := nethttp.Middleware(eng, core.Use("per_client"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := serve.HTTPServer(mw(svc))
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"

	base := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	defer base.CloseIdleConnections()
	var current atomic.Pointer[tally]
	current.Store(&tally{})

	var (
		wg      sync.WaitGroup
		clients []context.CancelFunc
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	start := func() {
		cctx, stop := context.WithCancel(ctx)
		clients = append(clients, stop)
		name := "client-" + strconv.Itoa(len(clients))
		client := &http.Client{Transport: pacer.MustNew(pacer.Config{Base: counting{base: base, t: &current}})}
		for range p.InFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(cctx, client, url, name, &current)
			}()
		}
	}
	stopAllBut := func(n int) {
		for _, stop := range clients[n:] {
			stop()
		}
		clients = clients[:n]
	}

	// The scale is sampled every half interval; the Steps a sample is
	// below the one before it (the first of a phase compared with the last
	// of the phase before) are falls of the phase. Counted in Steps, a late
	// sample that spans two updates still counts both.
	lowest, prev, falls := 1.0, ctl.Stats().Scale, 0
	fell := func(s float64) {
		if s < prev {
			falls += int(math.Ceil((prev-s)/p.Step - 1e-9))
		}
		prev = s
	}
	watch := func(d time.Duration, each func(elapsed time.Duration)) {
		t0 := time.Now()
		tick := time.NewTicker(p.Interval / 2)
		defer tick.Stop()
		for time.Since(t0) < d {
			<-tick.C
			s := ctl.Stats().Scale
			fell(s)
			lowest = min(lowest, s)
			if each != nil {
				each(time.Since(t0))
			}
		}
	}
	phase := func(name, clientsText string, d time.Duration, each func(time.Duration)) phaseRow {
		lowest, falls = prev, 0
		t := &tally{}
		current.Store(t)
		svc.drainWaits()
		watch(d, each)
		st := ctl.Stats()
		fell(st.Scale)
		t.mu.Lock()
		defer t.mu.Unlock()
		return phaseRow{
			Name: name, Clients: clientsText, Scale: st.Scale, LowestScale: min(lowest, st.Scale), Falls: falls,
			Quota: t.lastQuota, LowestQuota: t.lowestQuota,
			Sent: t.sent.Load(), Served: t.served.Load(), TooMany: t.tooMany.Load(), Unavailable: t.unavailable.Load(),
			Failed: t.failed.Load(),
			Wait:   median(svc.drainWaits()).Round(time.Millisecond),
		}
	}

	res := &results{Capacity: p.capacity()}
	for range p.Few {
		start()
	}
	res.Calm = phase("calm", strconv.Itoa(p.Few), p.Calm, nil)
	// More clients join, one at a time over the first half of the phase.
	joinEvery := p.Load / 2 / time.Duration(max(1, p.Peak-p.Few))
	res.Load = phase("load: clients join", fmt.Sprintf("%d → %d", p.Few, p.Peak), p.Load, func(elapsed time.Duration) {
		for len(clients) < p.Peak && elapsed >= time.Duration(len(clients)-p.Few+1)*joinEvery {
			start()
		}
	})
	for len(clients) < p.Peak {
		start()
	}
	stopAllBut(p.Last)
	res.After = phase("after: most clients go", strconv.Itoa(p.Last), p.After, nil)
	return res, nil
}

// send sends requests as fast as its client's pacer lets it until ctx
// ends, and counts those that end without a 200 (their retries spent) in
// the tally current when they started.
func send(ctx context.Context, client *http.Client, url, name string, current *atomic.Pointer[tally]) {
	for ctx.Err() == nil {
		t := current.Load()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("X-Client", name)
		res, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.failed.Add(1)
				time.Sleep(10 * time.Millisecond) // a refused connection, say: do not spin
			}
			continue
		}
		if res.StatusCode != http.StatusOK {
			t.failed.Add(1)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

// median returns the median of ds, or 0.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
