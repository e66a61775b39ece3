package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// clientJob is the work both clients do: Requests GETs by Workers
// goroutines against a server allowing Quota requests per second.
type clientJob struct {
	Requests, Workers int
	Quota             int64
}

type attempt struct {
	At     time.Duration
	Status int
}

// clientRun is what one client did.
type clientRun struct {
	Name, Note string
	Attempts   []attempt
	Done       time.Duration // when the last request succeeded
	Failed     int           // requests given up on
}

// Count returns how many attempts got status.
func (r *clientRun) Count(status int) int {
	n := 0
	for _, a := range r.Attempts {
		if a.Status == status {
			n++
		}
	}
	return n
}

// recorder is a RoundTripper that records every attempt.
type recorder struct {
	base  http.RoundTripper
	start time.Time
	mu    sync.Mutex
	run   *clientRun
}

func (rt *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	if err == nil {
		rt.mu.Lock()
		rt.run.Attempts = append(rt.run.Attempts, attempt{time.Since(rt.start), resp.StatusCode})
		rt.mu.Unlock()
	}
	return resp, err
}

// limitedServer serves 200 on a loopback port behind one fixed-window
// budget of quota requests per second for everyone, with IETF headers.
func limitedServer(quota int64) (string, func(), error) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		return "", nil, err
	}
	eng, err := core.New(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "api", Quota: quota, Window: time.Second, Key: keyfunc.Constant("all")},
	}})
	if err != nil {
		return "", nil, err
	}
	mw, err := nethttp.Middleware(eng, core.Use("api"))
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	srv := serve.HTTPServer(h) // the timeouts of every example's server
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close(); store.Close() }, nil
}

// clientRuns runs the job with a naive client and with pacer.Transport,
// at the same time, each against its own server.
func clientRuns(job clientJob) ([]*clientRun, error) {
	naive := &clientRun{Name: "naive client", Note: "retries every 50 ms, ignoring Retry-After and RateLimit"}
	paced := &clientRun{Name: "pacer.Transport", Note: "waits as Retry-After and the RateLimit fields say"}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, run := range []*clientRun{naive, paced} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runClient(job, run, run == paced)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return []*clientRun{naive, paced}, nil
}

func runClient(job clientJob, run *clientRun, transport bool) error {
	url, stop, err := limitedServer(job.Quota)
	if err != nil {
		return err
	}
	defer stop()
	base := &http.Transport{MaxIdleConnsPerHost: job.Workers}
	defer base.CloseIdleConnections()
	rec := &recorder{base: base, start: time.Now(), run: run}
	client := &http.Client{Transport: rec, Timeout: time.Minute}
	if transport {
		client.Transport = pacer.MustNew(pacer.Config{Base: rec, MaxAttempts: 20})
	}
	jobs := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range job.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				ok := false
				for try := 0; try < 200 && !ok; try++ {
					req, _ := http.NewRequestWithContext(context.Background(), "GET", url+"/work", nil)
					resp, err := client.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						ok = resp.StatusCode == http.StatusOK
					}
					if transport {
						break // the transport did its own retrying
					}
					if !ok {
						time.Sleep(50 * time.Millisecond)
					}
				}
				mu.Lock()
				if ok {
					run.Done = max(run.Done, time.Since(rec.start))
				} else {
					run.Failed++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range job.Requests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return nil
}

// clientSVG draws, for each client, the requests completed over time (a
// line), every 429 it got (red ticks), and its totals.
func clientSVG(job clientJob, runs []*clientRun) []byte {
	const (
		W, left, right = 760.0, 150.0, 200.0
		rowH, top      = 92.0, 60.0
	)
	end := time.Duration(0)
	most := 1
	for _, r := range runs {
		end = max(end, r.Done)
		most = max(most, r.Count(http.StatusOK))
		for _, a := range r.Attempts {
			end = max(end, a.At)
		}
	}
	span := float64(int(end.Seconds()) + 1)
	plotW := W - left - right
	x := func(d time.Duration) float64 { return left + d.Seconds()/span*plotW }
	H := top + rowH*float64(len(runs)) + 30
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="system-ui, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="12" y="22" font-size="15" font-weight="600">The same work against a server allowing %d requests per second (fixed window)</text>`+"\n", job.Quota)
	fmt.Fprintf(&b, `<text x="12" y="40" fill="#555">%d requests by %d workers, each client against its own server, on loopback. Line: requests done. Red ticks: 429s.</text>`+"\n", job.Requests, job.Workers)
	for i, r := range runs {
		y0 := top + rowH*float64(i)
		base := y0 + rowH - 26
		scale := (rowH - 40) / float64(most)
		fmt.Fprintf(&b, `<text x="12" y="%.1f" font-weight="600">%s</text>`+"\n", y0+20, r.Name)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555" font-size="11">%s</text>`+"\n", left, y0+10, r.Note)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, base, left+plotW, base)
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#2e8b57" stroke-width="1.5" points="%.1f,%.1f`, left, base)
		done := 0
		for _, a := range r.Attempts {
			if a.Status == http.StatusOK {
				fmt.Fprintf(&b, " %.1f,%.1f", x(a.At), base-float64(done)*scale)
				done++
				fmt.Fprintf(&b, " %.1f,%.1f", x(a.At), base-float64(done)*scale)
			}
		}
		b.WriteString(`"/>` + "\n")
		for _, a := range r.Attempts {
			if a.Status != http.StatusOK {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c0392b" stroke-opacity="0.6"/>`+"\n", x(a.At), base+3, x(a.At), base+13)
			}
		}
		failed := ""
		if r.Failed > 0 {
			failed = fmt.Sprintf(", %d given up", r.Failed)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%d attempts, <tspan fill="#c0392b">%d × 429</tspan></text>`+"\n", W-right+12, y0+40, len(r.Attempts), r.Count(http.StatusTooManyRequests))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%d done in %.1f s%s</text>`+"\n", W-right+12, y0+56, r.Count(http.StatusOK), r.Done.Seconds(), failed)
	}
	axis := top + rowH*float64(len(runs)) + 6
	for s := 0; s <= int(span); s++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%d s</text>`+"\n", x(time.Duration(s)*time.Second), axis+10, s)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
