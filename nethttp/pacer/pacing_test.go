package pacer_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// clientSequential sends n GETs one after the other and fails the test on
// any error or non-200.
func clientSequential(t *testing.T, c *http.Client, url string, n int) {
	t.Helper()
	for i := range n {
		if code, err := clientGet(t, c, url); code != 200 || err != nil {
			t.Fatalf("request %d: %d, %v", i, code, err)
		}
	}
}

// clientArrivals returns the seconds since start at which the server saw
// each request.
func clientArrivals(log *clientLog, start time.Time) []float64 {
	var s []float64
	for _, x := range log.list() {
		s = append(s, x.at.Sub(start).Seconds())
	}
	return s
}

// TestTransportPacesBeforeTheBudgetIsSpent: against quotagate's
// middleware, in every header style, the transport sends no more than r
// requests before t, so it is never refused; without pacing the same
// requests are.
func TestTransportPacesBeforeTheBudgetIsSpent(t *testing.T) {
	styles := map[string]core.HeaderStyle{"IETF": core.HeadersIETF, "draft": core.HeadersDraft, "X": core.HeadersX, "X epoch": core.HeadersXEpoch}
	for name, style := range styles {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientQuotagate(style, clientFixed(5, 10*time.Second))))
				c := clientTransport(t, pacer.Config{Base: base})
				start := time.Now()
				clientSequential(t, c, srv.URL+"/", 12)
				if n := log.count(429); n != 0 {
					t.Errorf("%d requests refused; want 0", n)
				}
				want := []float64{0, 0, 0, 0, 0, 10, 10, 10, 10, 10, 20, 20}
				if got := clientArrivals(&log, start); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("arrivals %v; want %v", got, want)
				}
			})
		})
	}
	t.Run("without pacing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var log clientLog
			srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF, clientFixed(5, 10*time.Second))))
			c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true})
			clientSequential(t, c, srv.URL+"/", 12)
			if n := log.count(429); n != 2 {
				t.Errorf("%d requests refused; want 2, one per exhausted window", n)
			}
		})
	})
}

// TestTransportPacingIsSharedByGoroutines: goroutines sharing a transport
// share its pacing state, against a fixed window and a token bucket.
func TestTransportPacingIsSharedByGoroutines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget core.Budget
		least  time.Duration // for 80 requests, starting on a window boundary
	}{
		{"fixed window 10 per 5s", clientFixed(10, 5*time.Second), 35 * time.Second},
		// A bucket of 10 that refills one every 500ms: 10 at once, then
		// 70 more at 500ms intervals.
		{"token bucket 10 per 5s", core.Budget{Name: "api", Algorithm: core.TokenBucket, Quota: 10, Window: 5 * time.Second}, 35 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF, tc.budget)))
				c := clientTransport(t, pacer.Config{Base: base})
				start := time.Now()
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() { clientSequential(t, c, srv.URL+"/", 10) })
				}
				wg.Wait()
				if n := log.count(429); n != 0 {
					t.Errorf("%d of %d requests refused; want 0", n, len(log.list()))
				}
				if d := time.Since(start); d < tc.least || d > tc.least+time.Second {
					t.Errorf("took %v; the server allows %v", d, tc.least)
				}
			})
		})
	}
}

// TestTransportPacesOnEveryPolicy: a response reporting several policies
// paces on all of them.
func TestTransportPacesOnEveryPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF,
			core.Budget{Name: "second", Quota: 3, Window: time.Second},
			core.Budget{Name: "ten", Quota: 10, Window: 10 * time.Second})))
		c := clientTransport(t, pacer.Config{Base: base})
		start := time.Now()
		clientSequential(t, c, srv.URL+"/", 25)
		if n := log.count(429); n != 0 {
			t.Errorf("%d requests refused; want 0", n)
		}
		want := []float64{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 10, 10, 10, 11, 11, 11, 12, 12, 12, 13, 20, 20, 20, 21, 21}
		if got := clientArrivals(&log, start); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("arrivals %v\nwant     %v", got, want)
		}
	})
}

// clientPacingCase is a first response's rate-limit fields and when the
// second request should go.
type clientPacingCase struct {
	name   string
	header map[string]string
	want   time.Duration
}

func clientRunPacingCases(t *testing.T, cases []clientPacingCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
					if n == 0 {
						for k, v := range tc.header {
							w.Header().Set(k, v)
						}
					}
				})))
				c := clientTransport(t, pacer.Config{Base: base})
				start := time.Now()
				clientSequential(t, c, srv.URL+"/", 2)
				if got := clientArrivals(&log, start); got[1] != tc.want.Seconds() {
					t.Errorf("second request at %vs; want %v", got[1], tc.want)
				}
			})
		})
	}
}

func TestTransportPacingReadsFields(t *testing.T) {
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix() // the bubble's start
	clientRunPacingCases(t, []clientPacingCase{
		{"String name", map[string]string{"RateLimit": `"api";r=0;t=5`}, 5 * time.Second},
		{"Token name", map[string]string{"RateLimit": `api;r=0;t=5`, "RateLimit-Policy": `api;q=3;w=5`}, 5 * time.Second},
		{"remaining quota left", map[string]string{"RateLimit": `"api";r=1;t=5`}, 0},
		{"one exhausted policy of two", map[string]string{"RateLimit": `"a";r=4;t=1, "b";r=0;t=7`}, 7 * time.Second},
		{"no t: the policy's window", map[string]string{"RateLimit": `"api";r=0`, "RateLimit-Policy": `"api";q=3;w=4`}, 4 * time.Second},
		{"draft fields", map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "6"}, 6 * time.Second},
		{"X fields, delta reset", map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "8"}, 8 * time.Second},
		{"X fields, epoch reset", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(epoch+9, 10)}, 9 * time.Second},
		{"X fields, epoch reset in ms", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(epoch*1000+2500, 10)}, 2500 * time.Millisecond},
	})
}

func TestTransportPacingIgnoresMalformedAndCachedFields(t *testing.T) {
	clientRunPacingCases(t, []clientPacingCase{
		{"trailing comma", map[string]string{"RateLimit": `"api";r=0;t=5,`}, 0},
		{"negative r", map[string]string{"RateLimit": `"api";r=-1;t=5`}, 0},
		{"t not an integer", map[string]string{"RateLimit": `"api";r=0;t=soon`}, 0},
		{"inner list", map[string]string{"RateLimit": `("api";r=0;t=5)`}, 0},
		{"integer name", map[string]string{"RateLimit": `5;r=0;t=5`}, 0},
		{"served from a cache", map[string]string{"RateLimit": `"api";r=0;t=5`, "Age": "12"}, 0},
		{"legacy, served from a cache", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5", "Age": "1"}, 0},
		{"legacy, bad remaining", map[string]string{"RateLimit-Remaining": "none", "RateLimit-Reset": "5"}, 0},
		{"legacy, bad reset", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "-5"}, 0},
	})
}

// TestTransportPacingIsPerHost: a host's exhausted budget does not hold
// back requests to another host; PacingScope can split one host.
func TestTransportPacingIsPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logA, logB clientLog
		exhausted := func(log *clientLog) http.Handler {
			return log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("RateLimit", `"api";r=0;t=60`)
			}))
		}
		_, baseA := startClientMemServer(t, exhausted(&logA))
		_, baseB := startClientMemServer(t, exhausted(&logB))
		base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == "b.test:80" {
				return baseB.DialContext(ctx, network, addr)
			}
			return baseA.DialContext(ctx, network, addr)
		}}
		defer base.CloseIdleConnections()
		c := clientTransport(t, pacer.Config{Base: base})
		start := time.Now()
		clientSequential(t, c, "http://a.test/", 1)
		clientSequential(t, c, "http://b.test/", 1)
		clientSequential(t, c, "http://a.test/", 1)
		if got := clientArrivals(&logA, start); fmt.Sprint(got) != "[0 60]" {
			t.Errorf("host a saw requests at %v; want [0 60]", got)
		}
		if got := clientArrivals(&logB, start); fmt.Sprint(got) != "[0]" {
			t.Errorf("host b saw requests at %v; want [0]", got)
		}

		// Scoped by path, /x and /y of one host are paced apart.
		var log clientLog
		srv, base2 := startClientMemServer(t, exhausted(&log))
		c = clientTransport(t, pacer.Config{Base: base2, PacingScope: func(r *http.Request) string { return r.URL.Host + r.URL.Path }})
		start = time.Now()
		clientSequential(t, c, srv.URL+"/x", 1)
		clientSequential(t, c, srv.URL+"/y", 1)
		clientSequential(t, c, srv.URL+"/x", 1)
		if got := clientArrivals(&log, start); fmt.Sprint(got) != "[0 0 60]" {
			t.Errorf("requests at %v; want [0 0 60]", got)
		}
	})
}

// TestTransportPacingWaitBeyondMaxWait: a reset further away than MaxWait
// ends the request before it is sent.
func TestTransportPacingWaitBeyondMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("RateLimit", `"daily";r=0;t=3600`)
		})))
		c := clientTransport(t, pacer.Config{Base: base})
		clientSequential(t, c, srv.URL+"/", 1)
		start := time.Now()
		_, err := clientGet(t, c, srv.URL+"/")
		re := clientRetryErr(t, err)
		if !errors.Is(err, pacer.ErrWaitTooLong) || re.Attempts != 0 || time.Since(start) != 0 {
			t.Errorf("error %v after %v", err, time.Since(start))
		}
		if n := len(log.list()); n != 1 {
			t.Errorf("server saw %d requests; want 1", n)
		}
	})
}

// TestTransportRetryAfterHoldsBackOtherWorkers: a 429 with Retry-After
// and no rate-limit fields makes every request to the host wait, not only
// the refused one.
func TestTransportRetryAfterHoldsBackOtherWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				w.Header().Set("Retry-After", "4")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})))
		c := clientTransport(t, pacer.Config{Base: base})
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { clientSequential(t, c, srv.URL+"/first", 1) })
		time.Sleep(time.Second)
		clientSequential(t, c, srv.URL+"/other", 1)
		wg.Wait()
		if got := clientArrivals(&log, start); fmt.Sprint(got) != "[0 4 4]" {
			t.Errorf("requests at %v; want [0 4 4]", got)
		}
	})
}

// TestTransportPacingWaitsForAttemptsInFlight: when only attempts in
// flight hold a policy's last units, the others wait for their answers,
// not for the policy's reset (an hour here, beyond MaxWait), and never more
// attempts are in flight than the server said were left.
func TestTransportPacingWaitsForAttemptsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inflight, most atomic.Int64
		srv, base := startClientMemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(100 * time.Millisecond) // the server takes its time
			w.Header().Set("RateLimit", `"daily";r=3;t=3600`)
		}))
		c := clientTransport(t, pacer.Config{Base: base})
		clientSequential(t, c, srv.URL+"/", 1)
		most.Store(0)
		start := time.Now()
		clientWorkers(t, []*http.Client{c}, 8, 5, srv.URL+"/")
		if m := most.Load(); m != 3 {
			t.Errorf("at most %d attempts in flight; want 3, the r the server reported", m)
		}
		// 40 requests, 3 at a time, 100ms each: 1.4s at least; toward
		// the end fewer than 3 workers may have requests left.
		if d := time.Since(start); d < 1400*time.Millisecond || d > 1600*time.Millisecond {
			t.Errorf("took %v; want 1.4s to 1.6s", d)
		}
	})
}

// TestTransportMaxWaitBoundsTheWholeWait: an attempt that hangs holding a
// policy's last unit keeps every other request of its scope waiting no
// longer than MaxWait in all, however many rounds the wait takes (one per
// window here, as each new window's unit is held by the hung attempt too);
// each then gives up unsent with ErrWaitTooLong.
func TestTransportMaxWaitBoundsTheWholeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hang" {
				time.Sleep(time.Minute)
			}
			w.Header().Set("RateLimit-Policy", `"p";q=1;w=1`)
			w.Header().Set("RateLimit", `"p";r=1`)
		})))
		const maxWait = 2 * time.Second
		c := clientTransport(t, pacer.Config{Base: base, MaxWait: maxWait})
		clientSequential(t, c, srv.URL+"/", 1)
		var wg sync.WaitGroup
		wg.Go(func() { clientSequential(t, c, srv.URL+"/hang", 1) })
		synctest.Wait() // the hung attempt holds the unit
		for _, delay := range []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond} {
			wg.Go(func() {
				time.Sleep(delay)
				start := time.Now()
				code, err := clientGet(t, c, srv.URL+"/")
				waited := time.Since(start)
				var re *pacer.RetryError
				if !errors.As(err, &re) || !errors.Is(err, pacer.ErrWaitTooLong) || re.Attempts != 0 || waited != maxWait {
					t.Errorf("a request started at %v: %d, %v after %v; want ErrWaitTooLong, unsent, after MaxWait (%v)", delay, code, err, waited, maxWait)
				}
			})
		}
		wg.Wait()
		if n := len(log.list()); n != 2 {
			t.Errorf("server saw %d requests; want 2, the first and the hung one", n)
		}
	})
}

// TestTransportBackoffWithinMaxWait: the backoff before a retry is a wait
// like any other; MaxWait bounds it where it is below BackoffCap.
func TestTransportBackoffWithinMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
		})))
		const maxWait = 2 * time.Second
		c := clientTransport(t, pacer.Config{Base: base, MaxAttempts: 10, MaxWait: maxWait}) // BackoffCap 30s
		for range 20 {
			if _, err := clientGet(t, c, srv.URL+"/"); !errors.Is(err, pacer.ErrAttemptsExhausted) {
				t.Fatalf("error %v", err)
			}
		}
		seen := log.list()
		for i := 1; i < len(seen); i++ {
			if d := seen[i].at.Sub(seen[i-1].at); d > maxWait {
				t.Fatalf("%v between attempts %d and %d; want at most MaxWait (%v)", d, i-1, i, maxWait)
			}
		}
	})
}

// TestTransportFarResetsAreProbed: a Retry-After or a reset further away
// than MaxReset (a nonsense value, or milliseconds read as seconds) holds
// the scope back for MaxReset only; then exactly one request asks the
// server again while the others wait for its answer, so that a server can
// always lift a block. Until then, requests fail or wait as for any reset.
func TestTransportFarResetsAreProbed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
	}{
		{"Retry-After beyond sense", 429, map[string]string{"Retry-After": "99999999999999999999999"}},
		{"Retry-After in milliseconds", 429, map[string]string{"Retry-After": "30000"}},
		{"Retry-After as a far date", 503, map[string]string{"Retry-After": "Fri, 31 Dec 2100 23:59:59 GMT"}},
		{"RateLimit t of a day", 200, map[string]string{"RateLimit": `"api";r=0;t=86400`}},
		{"RateLimit-Policy window of a day", 200, map[string]string{"RateLimit": `"api";r=0`, "RateLimit-Policy": `"api";q=10;w=86400`}},
		{"legacy reset of a day", 429, map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "86400"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientFarReset(1, tc.status, tc.header)))
				c := clientTransport(t, pacer.Config{Base: base}) // MaxWait 2m, MaxReset 5m
				start := time.Now()
				code, err := clientGet(t, c, srv.URL+"/")
				if tc.status == 200 && (code != 200 || err != nil) || tc.status != 200 && !errors.Is(err, pacer.ErrWaitTooLong) {
					t.Fatalf("first request: %d, %v", code, err)
				}
				time.Sleep(time.Minute)
				// 4 minutes of MaxReset left, more than MaxWait: at once.
				_, err = clientGet(t, c, srv.URL+"/")
				if re := clientRetryErr(t, err); !errors.Is(err, pacer.ErrWaitTooLong) || re.Attempts != 0 || time.Since(start) != time.Minute {
					t.Errorf("a request a minute on: %v at %v; want ErrWaitTooLong at once", err, time.Since(start))
				}
				time.Sleep(3 * time.Minute)
				// One minute left: these wait, one asks at 5m, and the
				// others go when its answer comes, a second later.
				clientWorkers(t, []*http.Client{c}, 4, 1, srv.URL+"/")
				if got := clientArrivals(&log, start); fmt.Sprint(got) != "[0 300 301 301 301]" {
					t.Errorf("server saw requests at %v; want [0 300 301 301 301]", got)
				}
			})
		})
	}
}

// clientFarReset answers the first refusals requests with status and
// header, the next one a second later with 200, and the others at once.
func clientFarReset(refusals, status int, header map[string]string) http.Handler {
	return clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
		switch {
		case n < refusals:
			for k, v := range header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(status)
		case n == refusals:
			time.Sleep(time.Second)
		}
	})
}

// TestTransportProbesOneAtATime: with MaxReset below MaxWait, a refused
// request itself waits MaxReset and asks again; a probe refused again
// blocks the scope for another MaxReset, and one that fails without an
// answer leaves the probing to the next request. Never are two probes in
// flight.
func TestTransportProbesOneAtATime(t *testing.T) {
	const huge = "99999999999999999999999"
	t.Run("refused again", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var log clientLog
			srv, base := startClientMemServer(t, log.wrap(clientFarReset(2, 429, map[string]string{"Retry-After": huge})))
			c := clientTransport(t, pacer.Config{Base: base, MaxReset: 10 * time.Second, MaxWait: time.Minute})
			start := time.Now()
			var wg sync.WaitGroup
			wg.Go(func() { clientSequential(t, c, srv.URL+"/", 1) })
			time.Sleep(5 * time.Second)
			clientWorkers(t, []*http.Client{c}, 3, 1, srv.URL+"/")
			wg.Wait()
			if got := clientArrivals(&log, start); fmt.Sprint(got) != "[0 10 20 21 21 21]" {
				t.Errorf("server saw requests at %v; want [0 10 20 21 21 21]", got)
			}
		})
	})
	t.Run("no answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var log clientLog
			srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
				switch n {
				case 0:
					w.Header().Set("Retry-After", huge)
					w.WriteHeader(http.StatusTooManyRequests)
				case 1: // the first probe gets no answer
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						_ = conn.Close()
					}
				case 2:
					time.Sleep(time.Second)
				}
			})))
			base.DisableKeepAlives = true // or net/http would resend the dropped probe itself
			// The dropped probe is retried within a millisecond, while the
			// next probe is in flight.
			c := clientTransport(t, pacer.Config{Base: base, MaxReset: 10 * time.Second, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond})
			start := time.Now()
			var wg sync.WaitGroup
			wg.Go(func() { clientSequential(t, c, srv.URL+"/", 1) })
			time.Sleep(5 * time.Second)
			clientWorkers(t, []*http.Client{c}, 3, 1, srv.URL+"/")
			wg.Wait()
			if got := clientArrivals(&log, start); fmt.Sprint(got) != "[0 10 10 11 11 11]" {
				t.Errorf("server saw requests at %v; want [0 10 10 11 11 11]", got)
			}
		})
	})
}

// TestTransportLongWindowsAreProbed: a window longer than MaxReset is not
// renewed when t passes; one request asks the server instead, which can
// then lift a quota of none.
func TestTransportLongWindowsAreProbed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				w.Header().Set("RateLimit-Policy", `"api";q=0;w=86400`)
				w.Header().Set("RateLimit", `"api";r=0;t=1`)
			}
		})))
		c := clientTransport(t, pacer.Config{Base: base})
		clientSequential(t, c, srv.URL+"/", 1)
		time.Sleep(2 * time.Second)
		if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
			t.Errorf("a request after t: %d, %v; want 200, the server asked", code, err)
		}
		if n := len(log.list()); n != 2 {
			t.Errorf("server saw %d requests; want 2", n)
		}
	})
}
