// Command adaptive shows an adaptive concurrency limit (package
// core/adaptive) protecting a service driven past its capacity.
//
// The service serves at most -capacity requests at once, each in a
// service time drawn evenly from ±25% around -service, and queues the
// rest, so its latency climbs as soon as more requests are in flight than
// it can serve. An open-loop load generator (Poisson arrivals: clients
// that do not wait for each other, as on the internet) sends it requests
// over real HTTP, first at half its capacity (the unloaded latency), then
// at -load times its capacity, without a limit and then behind a layer
// with an adaptive limit. It prints a table: throughput of served
// requests, their p50 and p99 latency, and the requests shed (503).
//
// Without a limit the queue grows for as long as the overload lasts, and
// so does the latency: the table shows the requests that arrived in the
// first and in the second half of the run. With the adaptive limit the
// requests beyond what the service can take are shed at once, and the
// served ones keep close to the unloaded latency.
//
//	go run ./examples/adaptive
//	go run ./examples/adaptive -duration 20s -load 2
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/nethttp"
)

func main() {
	var p params
	flag.IntVar(&p.Capacity, "capacity", 32, "requests the service serves at once")
	flag.DurationVar(&p.Service, "service", 100*time.Millisecond, "mean service time of one request")
	flag.Float64Var(&p.Load, "load", 1.5, "offered load while overloaded, as a multiple of capacity")
	flag.DurationVar(&p.Duration, "duration", 7*time.Second, "length of each overloaded run")
	flag.DurationVar(&p.Unloaded, "unloaded", 3*time.Second, "length of the unloaded run")
	trace := flag.Bool("trace", false, "print the adaptive limit's state twice a second (to stderr)")
	sp := steerParams{Warmup: 3 * time.Second, Window: 5 * time.Second, Storm: 5 * time.Second}
	flag.IntVar(&sp.Capacity, "steer-capacity", 8, "requests /work serves at once in the steering cases")
	flag.DurationVar(&sp.Service, "steer-service", 100*time.Millisecond, "mean service time of /work in the steering cases")
	cases := flag.String("cases", "overload,steer", "the tables to print: overload, steer, or both")
	flag.Parse()
	if *trace {
		p.Trace = os.Stderr
	}
	for _, c := range strings.Split(*cases, ",") {
		switch c {
		case "overload":
			res, err := run(p)
			if err != nil {
				log.Fatal(err)
			}
			res.print(os.Stdout, p)
		case "steer":
			rows, err := steer(sp)
			if err != nil {
				log.Fatal(err)
			}
			printSteer(os.Stdout, sp, rows)
		default:
			log.Fatalf("adaptive: unknown case %q (overload, steer)", c)
		}
		fmt.Println()
	}
}

// params sets up a demonstration.
type params struct {
	Capacity int           // requests served at once
	Service  time.Duration // mean service time
	Load     float64       // overload, times capacity
	Duration time.Duration // each overloaded run
	Unloaded time.Duration // the unloaded run
	Trace    io.Writer     // if not nil, gets the limit's state twice a second
}

// rate is the service's capacity in requests per second.
func (p params) rate() float64 { return float64(p.Capacity) / p.Service.Seconds() }

// row is one line of the table.
type row struct {
	Name      string
	Offered   float64 // requests per second sent
	Served    float64 // 200s completed per second of the run
	P50, P99  time.Duration
	Shed      int // 503s
	Unserved  int // requests not answered when the run ended
	requests  int
	latencies []time.Duration
}

// results are the rows, and the adaptive limit's state after its run.
type results struct {
	Unloaded, Early, Late row
	// Adaptive is the whole run with the adaptive limit, and AdaptiveLate
	// its second half, once the limit has found the capacity.
	Adaptive, AdaptiveLate row
	Limit                  adaptive.Stats
}

func run(p params) (*results, error) {
	var res results
	var err error
	if res.Unloaded, _, _, err = phase(p, 0.5, p.Unloaded, nil); err != nil {
		return nil, err
	}
	res.Unloaded.Name = "unloaded (0.5× capacity), no limit"
	if _, res.Early, res.Late, err = phase(p, p.Load, p.Duration, nil); err != nil {
		return nil, err
	}
	res.Early.Name = fmt.Sprintf("%.1f× capacity, no limit: first half", p.Load)
	res.Late.Name = fmt.Sprintf("%.1f× capacity, no limit: second half", p.Load)
	lim, err := adaptive.New(adaptive.Config{
		// A guess below the service's capacity: the limit finds the
		// capacity from the latency.
		Initial: int64(max(1, p.Capacity/2)),
		Max:     1000,
	})
	if err != nil {
		return nil, err
	}
	if p.Trace != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					s := lim.Stats()
					fmt.Fprintf(p.Trace, "limit %d, in flight %d, shed %d, mean latency %v, no-load %v\n",
						s.Limit, s.InFlight, s.Shed[adaptive.Critical], s.Latency.Round(time.Millisecond), s.NoLoad.Round(time.Millisecond))
				}
			}
		}()
	}
	if res.Adaptive, _, res.AdaptiveLate, err = phase(p, p.Load, p.Duration, lim); err != nil {
		return nil, err
	}
	res.Adaptive.Name = fmt.Sprintf("%.1f× capacity, adaptive limit", p.Load)
	res.AdaptiveLate.Name = fmt.Sprintf("%.1f× capacity, adaptive limit: second half", p.Load)
	res.Limit = lim.Stats()
	return &res, nil
}

// service is the handler: capacity requests at once, the rest wait.
func service(p params) http.Handler {
	slots := make(chan struct{}, p.Capacity)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable) // the client is gone
			return
		}
		d := time.Duration(float64(p.Service) * (0.75 + 0.5*rand.Float64()))
		time.Sleep(d)
		<-slots
		_, _ = io.WriteString(w, "ok\n")
	})
}

// handler returns h, behind an adaptive limit when lim is not nil: a
// load shedder alone, with no budget.
func handler(h http.Handler, lim *adaptive.Limiter) http.Handler {
	if lim == nil {
		return h
	}
	return nethttp.ShedBy(lim)(h)
}

// phase serves the service (behind lim, if not nil) on a fresh server,
// offers it load × capacity requests per second for d, and returns the
// rows of the whole run, and of the requests that arrived in its first
// and second half. Latencies are those of the requests a row counts;
// served/s counts the answers of the row's requests given before the run
// ended (its arrivals, and a second to answer the last ones).
func phase(p params, load float64, d time.Duration, lim *adaptive.Limiter) (all, first, second row, err error) {
	h := handler(service(p), lim)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return row{}, row{}, row{}, err
	}
	srv := serve.HTTPServer(h)     // the timeouts of every example's server,
	srv.WriteTimeout = time.Minute // but an unlimited queue is slow to answer
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	tr := &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "http://" + ln.Addr().String() + "/"

	rate := load * p.rate()
	var (
		mu      sync.Mutex
		samples []sample
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// Open loop: arrivals follow their schedule whatever the answers.
	next := time.Duration(0)
	for next < d {
		if wait := next - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
		at := next
		next += time.Duration(rand.ExpFloat64() / rate * float64(time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sample{at: at}
			t0 := time.Now()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if res, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				s.status = res.StatusCode
			}
			s.latency = time.Since(t0)
			if s.status == 0 && ctx.Err() == nil {
				log.Printf("adaptive: request failed before the run ended")
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}()
	}
	// Give the requests in flight a moment, then end the run: what is
	// still unanswered has waited at least until now.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(time.Second):
	}
	end := time.Since(start)
	cancel()
	wg.Wait()

	all, err = summarize(samples, 0, d, end)
	if err == nil {
		first, _ = summarize(samples, 0, d/2, end)
		second, _ = summarize(samples, d/2, d, end)
	}
	return all, first, second, err
}

// sample is one request of a run.
type sample struct {
	at, latency time.Duration // arrival since the run started; latency
	status      int           // 0: unanswered when the run ended
}

// summarize returns the row of the requests that arrived in [from, to):
// their latencies (200s, and unanswered requests, which waited at least
// until the run ended), and the 200s answered in [from, to) per second.
func summarize(samples []sample, from, to, end time.Duration) (row, error) {
	var r row
	served := 0
	for _, s := range samples {
		if s.status == http.StatusOK {
			if done := s.at + s.latency; done >= from && done < to {
				served++
			}
		}
		if s.at < from || s.at >= to {
			continue
		}
		r.requests++
		switch s.status {
		case http.StatusOK:
			r.latencies = append(r.latencies, s.latency)
		case http.StatusServiceUnavailable:
			r.Shed++
		case 0:
			r.Unserved++
			r.latencies = append(r.latencies, end-s.at)
		default:
			return row{}, fmt.Errorf("adaptive: unexpected status %d", s.status)
		}
	}
	secs := (to - from).Seconds()
	r.Offered, r.Served = float64(r.requests)/secs, float64(served)/secs
	slices.Sort(r.latencies)
	r.P50, r.P99 = percentile(r.latencies, 0.50), percentile(r.latencies, 0.99)
	return r, nil
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (res *results) print(w io.Writer, p params) {
	fmt.Fprintf(w, "service: %d requests at once, %v ± 25%% each: capacity %.0f requests/s\n\n", p.Capacity, p.Service, p.rate())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\toffered/s\tserved/s\tof capacity\tp50\tp99\tshed\tunanswered\t")
	for _, r := range []row{res.Unloaded, res.Early, res.Late, res.Adaptive, res.AdaptiveLate} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f%%\t%v\t%v\t%d\t%d\t\n", r.Name, r.Offered, r.Served,
			100*r.Served/p.rate(), r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Shed, r.Unserved)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nadaptive limit at the end: %d (no-load latency %v, last mean %v)\n",
		res.Limit.Limit, res.Limit.NoLoad.Round(time.Millisecond), res.Limit.Latency.Round(time.Millisecond))
	fmt.Fprintf(w, "goal: adaptive p99 within 2× unloaded p99: %.2f×; served at least 90%% of capacity: %.0f%%\n",
		float64(res.Adaptive.P99)/float64(res.Unloaded.P99), 100*res.Adaptive.Served/p.rate())
}
