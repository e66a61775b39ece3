package adaptive_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/nethttp"
)

func engine(t testing.TB, budgets ...core.Budget) *core.Engine {
	t.Helper()
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if len(budgets) == 0 {
		budgets = []core.Budget{{Name: "b", Algorithm: core.FixedWindow, Quota: 1e12, Window: time.Hour,
			Key: func(*core.Request) (string, error) { return "k", nil }}}
	}
	return core.MustNew(core.Config{Store: st, Budgets: budgets})
}

func fixed(n int64) *adaptive.Limiter {
	return adaptive.MustNew(adaptive.Config{Initial: n, Min: n, Max: n, Samples: 1, SampleEvery: 1})
}

func TestDecideHoldsThePlaceUntilDone(t *testing.T) {
	eng := engine(t, core.Budget{Name: "two", Algorithm: core.SlidingLog, Quota: 2, Window: time.Hour,
		Key: func(*core.Request) (string, error) { return "k", nil }})
	lim := fixed(2)
	l := eng.MustLayer(core.Use("two"), core.GuardBy(lim))
	r := &core.Request{Method: "GET", Path: "/"}
	var d1, d2, d3 core.Decision
	l.Decide(r, &d1)
	l.Decide(r, &d2)
	l.Decide(r, &d3)
	if !d1.Allowed || !d2.Allowed || d2.Guard.InFlight != 2 || d2.Guard.Limit != 2 {
		t.Fatalf("first two: %+v / %+v", d1, d2.Guard)
	}
	if d3.Allowed || d3.Reason != core.ReasonOverloaded || d3.DeniedBy != "adaptive" || d3.RetryAfter != time.Second || len(d3.Results) != 0 || d3.Guard.Shed != 1 {
		t.Fatalf("third: allowed %v, reason %v, by %q, retry %v, results %d, guard %+v", d3.Allowed, d3.Reason, d3.DeniedBy, d3.RetryAfter, len(d3.Results), d3.Guard)
	}
	d3.Done(context.Background(), 0) // nothing held: no effect
	d1.Done(context.Background(), 200)
	d1.Done(context.Background(), 200) // once only
	if got := lim.Stats().InFlight; got != 1 {
		t.Errorf("in flight after one Done = %d, want 1", got)
	}
	// The shed request spent nothing: the budget's second unit went to d2,
	// so the next admitted request is denied by the budget, and its place
	// is given back at once.
	var d4 core.Decision
	l.Decide(r, &d4)
	if d4.Allowed || d4.Reason != core.ReasonRateLimited {
		t.Fatalf("fourth: allowed %v, reason %v", d4.Allowed, d4.Reason)
	}
	d2.Done(context.Background(), 200)
	if s := lim.Stats(); s.InFlight != 0 || s.Latency <= 0 {
		t.Errorf("after every Done: %+v, want nothing in flight and a latency sample", s)
	}
	d1.Reset()
	if d1.Guard != (core.GuardState{}) {
		t.Errorf("Reset left the guard state %+v", d1.Guard)
	}
}

func TestSkippedRequestNeverReachesTheGuard(t *testing.T) {
	lim := fixed(1)
	l := engine(t).MustLayer(core.GuardBy(lim), core.Skip(func(r *core.Request) bool { return r.Path == "/health" }))
	for range 3 {
		var d core.Decision
		l.Decide(&core.Request{Path: "/health"}, &d)
		if !d.Allowed || d.Guard != (core.GuardState{}) {
			t.Fatalf("skipped: allowed %v, guard %+v", d.Allowed, d.Guard)
		}
	}
	if s := lim.Stats(); s.InFlight != 0 {
		t.Errorf("skipped requests counted: %+v", s)
	}
}

func TestLayerNeedsBudgetsOrAGuard(t *testing.T) {
	eng := engine(t)
	if _, err := eng.Layer(); err == nil || !strings.Contains(err.Error(), "no guard") {
		t.Errorf("a layer of nothing: err = %v", err)
	}
	l, err := eng.Layer(core.GuardBy(fixed(1)))
	if err != nil {
		t.Fatal(err)
	}
	var d core.Decision
	l.Decide(&core.Request{}, &d)
	if !d.Allowed || len(d.Results) != 0 || d.Guard.InFlight != 1 {
		t.Errorf("guard-only layer: allowed %v, %d results, guard %+v", d.Allowed, len(d.Results), d.Guard)
	}
	d.Done(context.Background(), 200)
}

// A request admitted by an outer guard and shed by an inner one gives its
// outer place back without a latency sample.
func TestInnerShedReleasesOuterWithoutSample(t *testing.T) {
	eng := engine(t)
	outer, inner := fixed(5), adaptive.MustNew(adaptive.Config{Name: "inner", Initial: 1, Min: 1, Max: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(nethttp.MustMiddleware(eng, core.GuardBy(outer))(nethttp.MustMiddleware(eng, core.GuardBy(inner))(h)))
	defer srv.Close()
	done := make(chan int)
	go func() {
		res, err := http.Get(srv.URL + "/block")
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-entered
	res, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "overloaded") {
		t.Errorf("shed by the inner guard: %d, Retry-After %q, body %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if s := outer.Stats(); s.InFlight != 1 || s.Latency != 0 {
		t.Errorf("outer guard after the inner shed: %+v, want the blocked request only and no sample", s)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("blocked request: %d", code)
	}
	if s := outer.Stats(); s.InFlight != 0 || s.Latency == 0 {
		t.Errorf("outer guard at the end: %+v, want nothing in flight and one sample", s)
	}
	if s := inner.Stats(); s.InFlight != 0 || s.Shed[adaptive.Critical] != 1 {
		t.Errorf("inner guard at the end: %+v", s)
	}
}

// Many clients through two stacked layers, the outer one guarded: some
// handlers panic, the inner layer denies some requests, some are shed.
// Every place is given back: nothing is in flight at the end, and no
// admitted request ever saw more in flight than the limit.
func TestConcurrentThroughMiddleware(t *testing.T) {
	eng := engine(t, core.Budget{Name: "odd", Algorithm: core.SlidingLog, Quota: 1, Window: time.Hour,
		Key: func(r *core.Request) (string, error) { return r.Path, nil }})
	lim := adaptive.MustNew(adaptive.Config{Initial: 4, Min: 2, Max: 8, Samples: 5, SampleEvery: 1})
	var over atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := lim.Stats().InFlight; n > 8 || n < 1 {
			over.Add(1)
		}
		if strings.HasSuffix(r.URL.Path, "/panic") {
			panic(http.ErrAbortHandler) // net/http closes the connection quietly
		}
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	})
	inner := nethttp.MustMiddleware(eng, core.Use("odd"))
	outer := nethttp.MustMiddleware(eng, core.GuardBy(lim))
	mux := http.NewServeMux()
	mux.Handle("/odd/", inner(h))
	mux.Handle("/", h)
	srv := httptest.NewServer(outer(mux))
	defer srv.Close()

	start := time.Now()
	var wg sync.WaitGroup
	var codes [600]atomic.Int64
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				path := "/x"
				switch i % 4 {
				case 1:
					path = "/x/panic"
				case 2:
					path = fmt.Sprintf("/odd/%d", (g*40+i)%7) // the budget allows one per path
				}
				res, err := http.Get(srv.URL + path)
				if err != nil {
					codes[0].Add(1) // the panicking handler's aborted response
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				codes[res.StatusCode].Add(1)
			}
		}()
	}
	wg.Wait()
	if over.Load() != 0 {
		t.Errorf("%d handler calls saw a count outside [1, 8]", over.Load())
	}
	if codes[200].Load() == 0 || codes[429].Load() == 0 || codes[503].Load() == 0 || codes[0].Load() == 0 {
		t.Errorf("want every outcome: 200 %d, 429 %d, 503 %d, aborted %d", codes[200].Load(), codes[429].Load(), codes[503].Load(), codes[0].Load())
	}
	t.Logf("requests done after %v", time.Since(start))
	deadline := time.Now().Add(5 * time.Second)
	for lim.Stats().InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // an aborted response may reach the client first
	}
	if s := lim.Stats(); s.InFlight != 0 {
		t.Errorf("in flight after every request ended: %+v", s)
	}
}

// Over real HTTP, through the net/http middleware of a layer that reports
// no statuses: a client sending 404s and requests whose handler panics,
// at 10× the rate of a guarded route under the same layer, does not take
// the route's service away. The route serves 8 requests at once in 400ms
// each and queues the rest; it gets 0.8× that (16 requests a second, and
// the client 160: few enough for -race on a machine whose cores are
// busy), and the tally counts its requests after a warm-up.
func TestCheapRequestsOverHTTP(t *testing.T) {
	const (
		c       = 8
		service = 400 * time.Millisecond
		warmup  = 4 * time.Second
		run     = 10 * time.Second
	)
	if testing.Short() {
		t.Skip("10s of load over real HTTP")
	}
	lim := adaptive.MustNew(adaptive.Config{Initial: c, Min: 2})
	mux := http.NewServeMux()
	mux.Handle("/work", slotted(c, service))
	mux.HandleFunc("/boom", func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler) // net/http closes the connection quietly
	})
	srv := httptest.NewServer(nethttp.MustMiddleware(engine(t), core.GuardBy(lim))(mux))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 1024}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var arrived, served, shed, failed atomic.Int64
	var wg sync.WaitGroup
	send := func(path string, rate float64, count bool) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, uint64(len(path))))
		start := time.Now()
		at := time.Duration(0)
		for {
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if at >= run {
				return
			}
			time.Sleep(at - time.Since(start))
			measured := count && at >= warmup
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := client.Get(srv.URL + path)
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				if !measured {
					return
				}
				arrived.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
				case res.StatusCode == http.StatusOK:
					served.Add(1)
				case res.StatusCode == http.StatusServiceUnavailable:
					shed.Add(1)
				default:
					failed.Add(1)
				}
			}()
		}
	}
	rate := 0.8 * c / service.Seconds()
	wg.Add(3)
	go send("/work", rate, true)
	go send("/nothing-here", 5*rate, false)
	go send("/boom", 5*rate, false)
	wg.Wait()

	s := lim.Stats()
	n := max(1, arrived.Load())
	t.Logf("/work: %d requests from %v on, %.1f%% served, %.1f%% shed, %d failed; limiter %+v",
		n, warmup, 100*float64(served.Load())/float64(n), 100*float64(shed.Load())/float64(n), failed.Load(), s)
	if failed.Load() != 0 {
		t.Errorf("%d requests to /work failed", failed.Load())
	}
	if share := float64(served.Load()) / float64(n); share < 0.85 {
		t.Errorf("/work got %.1f%% of its requests served, want at least 85%%", 100*share)
	}
}

// Over real HTTP, a closed loop of 12 clients (each sending again when
// answered, and one service time after a shed request) on a route that
// serves 8 at once in 200ms each, under a limit started at 32, which they
// never fill: the probe of a closed loop (Starting anywhere in the
// package documentation) finds the route's queue, and after a warm-up the
// median served request waits at most 1.35 × the service time. Without
// the probe, all 12 stay in flight and the median is 1.5 × (300ms).
func TestClosedLoopOverHTTP(t *testing.T) {
	const (
		c       = 8
		clients = 12
		service = 200 * time.Millisecond
		warmup  = 6 * time.Second
		run     = 12 * time.Second
	)
	if testing.Short() {
		t.Skip("12s of load over real HTTP")
	}
	lim := adaptive.MustNew(adaptive.Config{Initial: 4 * c})
	mux := http.NewServeMux()
	mux.Handle("/work", slotted(c, service))
	srv := httptest.NewServer(nethttp.MustMiddleware(engine(t), core.GuardBy(lim))(mux))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var mu sync.Mutex
	var latencies []time.Duration
	var shed, failed int
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < run {
				sent := time.Now()
				res, err := client.Get(srv.URL + "/work")
				lat := time.Since(sent)
				status := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					status = res.StatusCode
				}
				mu.Lock()
				measured := sent.Sub(start) >= warmup
				switch {
				case status == http.StatusOK && measured:
					latencies = append(latencies, lat)
				case status == http.StatusServiceUnavailable && measured:
					shed++
				case status != http.StatusOK && status != http.StatusServiceUnavailable:
					failed++
				}
				mu.Unlock()
				if status != http.StatusOK {
					time.Sleep(service)
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(latencies)
	if len(latencies) == 0 {
		t.Fatalf("no request served after %v (%d shed, %d failed)", warmup, shed, failed)
	}
	p50 := latencies[len(latencies)/2]
	t.Logf("after %v: %d served, p50 %v, %d shed, %d failed; limiter %+v", warmup, len(latencies), p50, shed, failed, lim.Stats())
	if failed != 0 {
		t.Errorf("%d requests failed", failed)
	}
	if p50 > service*135/100 {
		t.Errorf("p50 %v, want at most 1.35 × %v", p50, service)
	}
}

// slotted returns a handler that serves c requests at once, each for
// service, and queues the rest.
func slotted(c int, service time.Duration) http.Handler {
	slots := make(chan struct{}, c)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		slots <- struct{}{}
		time.Sleep(service)
		<-slots
		_, _ = io.WriteString(w, "ok")
	})
}
