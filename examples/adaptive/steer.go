package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/examples/internal/serve"
)

// The steering cases ask whether a client can steer the adaptive limit
// away from the service it protects. The app has one guarded route of
// fixed capacity (/work, the service above; /reports is the same work,
// Sheddable), and under the same layer, answered at once: a 500 (/error),
// a handler that panics (/boom), and 404s for every other path. The layer
// reports no response status to the limiter (it has no core.CountWhen),
// the harder case: the limiter cannot tell an error from a success.

// steerParams sets up the steering cases.
type steerParams struct {
	Capacity int           // requests /work serves at once
	Service  time.Duration // its mean service time
	Warmup   time.Duration // arrivals not counted at the start of a case
	Window   time.Duration // arrivals counted
	Storm    time.Duration // the storm of errors
}

func (p steerParams) service() params { return params{Capacity: p.Capacity, Service: p.Service} }

// sheddable is when the Sheddable case starts counting: the warm-up, and
// the time the limit takes to grow from Initial (the capacity) to what
// Sheddable traffic needs (see steerCases).
func (p steerParams) sheddable() time.Duration {
	return p.Warmup + (400 * p.Service / time.Duration(p.Capacity)).Round(time.Second)
}

// rate is /work's capacity in requests per second.
func (p steerParams) rate() float64 { return p.service().rate() }

// flow is one client's open-loop traffic to path: rate requests per
// second (Poisson arrivals) in [from, to) since the case started.
type flow struct {
	path     string
	rate     float64
	from, to time.Duration
}

// window is a row of a case's table: the arrivals of path in [from, to).
type window struct {
	name     string
	path     string
	from, to time.Duration
}

// steerCase is traffic and the rows it is measured by.
type steerCase struct {
	flows   []flow
	windows []window
}

// steerRow is one line of the steering table.
type steerRow struct {
	Name         string
	Offered      float64 // the route's requests per second
	Served, Shed float64 // shares of the route's requests: 200s, 503s
	P99          time.Duration
	LimLo, LimHi int64         // the limit while the row's requests arrived
	NoLoad       time.Duration // the limiter's no-load latency at the row's end
}

// steerCases returns the cases: a client sending cheap requests beside
// the route at 0.8× its capacity, a storm of errors before it, and
// Sheddable traffic alone.
func steerCases(p steerParams) []steerCase {
	r := p.rate()
	w, n := p.Warmup, p.Warmup+p.Window
	route := func(name string) []window { return []window{{name, "/work", w, n}} }
	attack := func(paths ...string) []flow {
		fl := []flow{{"/work", 0.8 * r, 0, n}}
		for _, path := range paths {
			fl = append(fl, flow{path, 10 * 0.8 * r / float64(len(paths)), 0, n})
		}
		return fl
	}
	s := p.Storm
	return []steerCase{
		{attack(), route("/work at 0.8× capacity, alone")},
		{attack("/nothing"), route("/work at 0.8×, 404s at 10× its rate")},
		{attack("/nothing", "/error", "/boom"), route("/work at 0.8×, 404s, 500s and panics at 10×")},
		{[]flow{{"/error", 5 * 0.8 * r, 0, s}, {"/boom", 5 * 0.8 * r, 0, s}, {"/work", 0.8 * r, s, s + 2*p.Window}},
			[]window{
				{fmt.Sprintf("%v of 500s and panics, then /work at 0.8×: first %v", s, p.Window), "/work", s, s + p.Window},
				{fmt.Sprintf("... then %v to %v after", p.Window, 2*p.Window), "/work", s + p.Window, s + 2*p.Window},
			}},
		// Sheddable requests may use half of the limit, so the limit
		// must grow to twice what they need. It grows by up to 1.25× per
		// update, and an update takes 40 requests (10 timed samples): from
		// Initial L, with requests served at L/2 / service a second, that
		// is about 400 × service / L.
		{[]flow{{"/reports", 0.7 * r, 0, p.sheddable() + p.Window}},
			[]window{{fmt.Sprintf("/reports (Sheddable) alone at 0.7×, from %v on", p.sheddable()), "/reports", p.sheddable(), p.sheddable() + p.Window}}},
	}
}

// steer runs the steering cases, each on a new server and limiter.
func steer(p steerParams) ([]steerRow, error) {
	var rows []steerRow
	for _, c := range steerCases(p) {
		r, err := c.run(p)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// app is the steering cases' application.
func (p steerParams) app() http.Handler {
	work := service(p.service())
	mux := http.NewServeMux()
	mux.Handle("/work", work)
	mux.Handle("/reports", work)
	mux.HandleFunc("/error", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "failed", http.StatusInternalServerError)
	})
	mux.HandleFunc("/boom", func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler) // net/http closes the connection quietly
	})
	return mux
}

// arrival is one request of a case.
type arrival struct {
	path        string
	at, latency time.Duration
	status      int // 0: no response (a panic, or the case ended)
}

func (c steerCase) run(p steerParams) ([]steerRow, error) {
	lim, err := adaptive.New(adaptive.Config{
		// The capacity, as a guess from a load test would be: the rows
		// show what the clients do to the limit, not the limit finding
		// the capacity (the overload table shows that).
		Initial: int64(p.Capacity), Min: 2, Max: 1000,
		Priority: func(r *core.Request) adaptive.Priority {
			if r.Path == "/reports" {
				return adaptive.Sheddable
			}
			return adaptive.Critical
		},
	})
	if err != nil {
		return nil, err
	}
	h := handler(p.app(), lim)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := serve.HTTPServer(h)     // the timeouts of every example's server,
	srv.WriteTimeout = time.Minute // with phase's longer write timeout
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	base := "http://" + ln.Addr().String()

	var end time.Duration
	for _, f := range c.flows {
		end = max(end, f.to)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		arrivals []arrival
		limits   []int64 // the limit every 100ms
		wg       sync.WaitGroup
	)
	start := time.Now()
	wg.Add(1)
	go func() { // the limit, every 100ms
		defer wg.Done()
		for at := time.Duration(0); at < end; at += 100 * time.Millisecond {
			time.Sleep(at - time.Since(start))
			mu.Lock()
			limits = append(limits, lim.Stats().Limit)
			mu.Unlock()
		}
	}()
	for i, f := range c.flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(f.from)))
			for at := f.from; ; {
				at += time.Duration(rng.ExpFloat64() / f.rate * float64(time.Second))
				if at >= f.to {
					return
				}
				time.Sleep(at - time.Since(start))
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := arrival{path: f.path, at: at}
					t0 := time.Now()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+f.path, nil)
					if res, err := client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						a.status = res.StatusCode
					}
					a.latency = time.Since(t0)
					mu.Lock()
					arrivals = append(arrivals, a)
					mu.Unlock()
				}()
			}
		}()
	}
	// The flows end at end; give the last requests a moment.
	time.Sleep(end + time.Second - time.Since(start))
	cancel()
	wg.Wait()
	noLoad := lim.Stats().NoLoad

	var rows []steerRow
	for _, w := range c.windows {
		row := steerRow{Name: w.name, LimLo: 1 << 62, NoLoad: noLoad}
		var lats []time.Duration
		n, served, shed := 0, 0, 0
		for _, a := range arrivals {
			if a.path != w.path || a.at < w.from || a.at >= w.to {
				continue
			}
			n++
			switch a.status {
			case http.StatusOK:
				served++
				lats = append(lats, a.latency)
			case http.StatusServiceUnavailable:
				shed++
			}
		}
		for i, l := range limits {
			if at := time.Duration(i) * 100 * time.Millisecond; at >= w.from && at < w.to {
				row.LimLo, row.LimHi = min(row.LimLo, l), max(row.LimHi, l)
			}
		}
		slices.Sort(lats)
		row.Offered = float64(n) / (w.to - w.from).Seconds()
		row.Served, row.Shed = float64(served)/float64(max(1, n)), float64(shed)/float64(max(1, n))
		row.P99 = percentile(lats, 0.99)
		rows = append(rows, row)
	}
	return rows, nil
}

func printSteer(w io.Writer, p steerParams, rows []steerRow) {
	fmt.Fprintf(w, "/work: %d requests at once, %v ± 25%% each: capacity %.0f requests/s; limit from %d; counted after %v\n\n",
		p.Capacity, p.Service, p.rate(), p.Capacity, p.Warmup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\toffered/s\tserved\tshed\tp99\tlimit\tno-load at the end\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f%%\t%.1f%%\t%v\t%d..%d\t%v\t\n", r.Name, r.Offered, 100*r.Served, 100*r.Shed,
			r.P99.Round(time.Millisecond), r.LimLo, r.LimHi, r.NoLoad.Round(time.Microsecond))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\ngoal: /work at least 85% served in every case, /reports at least 95%")
}

// steerTable is printSteer into a string.
func steerTable(p steerParams, rows []steerRow) string {
	var b strings.Builder
	printSteer(&b, p, rows)
	return b.String()
}
