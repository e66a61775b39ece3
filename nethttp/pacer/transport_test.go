package pacer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	stdlog "log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/nethttp"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// clientSeen is one request a test server answered.
type clientSeen struct {
	at     time.Time
	method string
	path   string
	body   string
	key    string
	status int
}

// clientLog records what a test server answers.
type clientLog struct {
	mu   sync.Mutex
	seen []clientSeen
}

func (l *clientLog) list() []clientSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]clientSeen(nil), l.seen...)
}

func (l *clientLog) statuses() []int {
	var s []int
	for _, x := range l.list() {
		s = append(s, x.status)
	}
	return s
}

func (l *clientLog) count(status int) int {
	n := 0
	for _, x := range l.list() {
		if x.status == status {
			n++
		}
	}
	return n
}

// wrap records every request h answers, before the client can see the
// answer.
func (l *clientLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		l.mu.Lock()
		i := len(l.seen)
		l.seen = append(l.seen, clientSeen{at: time.Now(), method: r.Method, path: r.URL.Path, body: string(b), key: r.Header.Get("Idempotency-Key")})
		l.mu.Unlock()
		rec := &clientStatusWriter{ResponseWriter: w, onStatus: func(code int) {
			l.mu.Lock()
			l.seen[i].status = code
			l.mu.Unlock()
		}}
		h.ServeHTTP(rec, r)
		rec.finish()
	})
}

// clientScript answers the n-th request (counting from 0) with respond.
func clientScript(respond func(n int, w http.ResponseWriter, r *http.Request)) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		respond(int(n.Add(1)-1), w, r)
	})
}

func clientConstKey(*core.Request) (string, error) { return "all", nil }

// clientQuotagate is a server limited by quotagate's own middleware: the
// budgets (keyed to one partition) in one layer, headers in style.
func clientQuotagate(style core.HeaderStyle, budgets ...core.Budget) http.Handler {
	var names []string
	for i := range budgets {
		if budgets[i].Key == nil {
			budgets[i].Key = clientConstKey
		}
		names = append(names, budgets[i].Name)
	}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	eng := core.MustNew(core.Config{Store: store, Budgets: budgets, Headers: style})
	return nethttp.MustMiddleware(eng, core.Use(names...))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
}

// clientFixed is a fixed-window budget named "api".
func clientFixed(quota int64, window time.Duration) core.Budget {
	return core.Budget{Name: "api", Algorithm: core.FixedWindow, Quota: quota, Window: window}
}

// clientCall sends req through c and returns the status (0 on error) and
// error, having read and closed the body.
func clientCall(c *http.Client, req *http.Request) (int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func clientGet(t *testing.T, c *http.Client, url string) (int, error) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return clientCall(c, req)
}

// clientRetryErr extracts the *RetryError from err.
func clientRetryErr(t *testing.T, err error) *pacer.RetryError {
	t.Helper()
	var re *pacer.RetryError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *RetryError", err, err)
	}
	return re
}

func clientTransport(t *testing.T, cfg pacer.Config) *http.Client {
	t.Helper()
	tr, err := pacer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func TestTransportRetries429HonouringRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF, clientFixed(2, 10*time.Second))))
		c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true})
		time.Sleep(3 * time.Second) // 7 s before the window ends
		start := time.Now()
		for i := range 3 {
			if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
				t.Fatalf("request %d: %d, %v", i, code, err)
			}
		}
		if got, want := log.statuses(), []int{200, 200, 429, 200}; !equalInts(got, want) {
			t.Fatalf("server answered %v; want %v", got, want)
		}
		seen := log.list()
		if d := seen[3].at.Sub(seen[2].at); d != 7*time.Second {
			t.Errorf("retried after %v; want the Retry-After of 7s", d)
		}
		if d := time.Since(start); d != 7*time.Second {
			t.Errorf("took %v; want 7s", d)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTransportRetries503OnlyWithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/shed" && n%2 == 0:
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusServiceUnavailable)
			case r.URL.Path == "/down":
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})))
		c := clientTransport(t, pacer.Config{Base: base})
		start := time.Now()
		if code, err := clientGet(t, c, srv.URL+"/shed"); code != 200 || err != nil {
			t.Fatalf("/shed: %d, %v", code, err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("/shed took %v; want the Retry-After of 2s", d)
		}
		// A POST is retried too: the server shed it without doing it.
		req, _ := http.NewRequest("POST", srv.URL+"/shed", strings.NewReader("x"))
		if code, err := clientCall(c, req); code != 200 || err != nil {
			t.Fatalf("POST /shed: %d, %v", code, err)
		}
		if code, err := clientGet(t, c, srv.URL+"/down"); code != 503 || err != nil {
			t.Fatalf("/down: %d, %v; want the 503 itself", code, err)
		}
		if got, want := log.statuses(), []int{503, 200, 503, 200, 503}; !equalInts(got, want) {
			t.Errorf("server answered %v; want %v", got, want)
		}
	})
}

// TestTransportDoesNotRetryOtherStatuses runs against a loopback server:
// no status but 429 and 503-with-Retry-After is retried, whatever headers
// it carries.
func TestTransportDoesNotRetryOtherStatuses(t *testing.T) {
	var log clientLog
	srv := httptest.NewServer(log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.Header().Set("Retry-After", "1")
		w.Header().Set("RateLimit", `"api";r=0;t=1`)
		w.WriteHeader(code)
	})))
	defer srv.Close()
	c := clientTransport(t, pacer.Config{Base: srv.Client().Transport, DisablePacing: true})
	for _, code := range []int{200, 204, 304, 400, 401, 403, 404, 409, 413, 422, 500, 501, 502, 504} {
		before := len(log.list())
		got, err := clientGet(t, c, srv.URL+"/?code="+strconv.Itoa(code))
		if err != nil || got != code {
			t.Errorf("status %d: got %d, %v", code, got, err)
		}
		if n := len(log.list()) - before; n != 1 {
			t.Errorf("status %d: %d attempts; want 1", code, n)
		}
	}
}

// clientDropper drops the connection of the first drops requests without
// answering, then answers 200.
func clientDropper(drops int) http.Handler {
	return clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
		if n < drops {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

// TestTransportNetworkErrors runs against loopback servers that drop
// connections: network errors are retried for idempotent methods and for
// requests with an Idempotency-Key, never otherwise.
func TestTransportNetworkErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		method   string
		key      string
		addKey   bool
		wantOK   bool
		attempts int
	}{
		{"GET", "GET", "", false, true, 3},
		{"PUT", "PUT", "", false, true, 3},
		{"DELETE", "DELETE", "", false, true, 3},
		{"POST without a key", "POST", "", false, false, 1},
		{"PATCH without a key", "PATCH", "", false, false, 1},
		{"POST with a key", "POST", `"k-123"`, false, true, 3},
		{"POST with an added key", "POST", "", true, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log clientLog
			srv := httptest.NewServer(log.wrap(clientDropper(2)))
			defer srv.Close()
			base := &http.Transport{DisableKeepAlives: true} // one attempt, one connection
			c := clientTransport(t, pacer.Config{Base: base, BackoffBase: time.Millisecond, BackoffCap: 5 * time.Millisecond, AddIdempotencyKey: tc.addKey})
			req, _ := http.NewRequest(tc.method, srv.URL+"/", strings.NewReader("body-bytes"))
			if tc.key != "" {
				req.Header.Set("Idempotency-Key", tc.key)
			}
			code, err := clientCall(c, req)
			seen := log.list()
			if len(seen) != tc.attempts {
				t.Fatalf("server saw %d attempts; want %d", len(seen), tc.attempts)
			}
			if !tc.wantOK {
				re := clientRetryErr(t, err)
				if !errors.Is(err, pacer.ErrNotIdempotent) || re.Attempts != 1 || len(re.Failures) != 1 || re.Failures[0].Err == nil {
					t.Fatalf("error %v: %+v", err, re)
				}
				return
			}
			if code != 200 || err != nil {
				t.Fatalf("got %d, %v", code, err)
			}
			for i, s := range seen {
				if s.body != "body-bytes" || s.key != seen[0].key {
					t.Errorf("attempt %d sent body %q, key %q; attempt 0 sent %q, %q", i, s.body, s.key, "body-bytes", seen[0].key)
				}
			}
			switch {
			case tc.key != "" && seen[0].key != tc.key:
				t.Errorf("sent key %q; want %q", seen[0].key, tc.key)
			case tc.addKey:
				it, err := httpsfv.UnmarshalItem([]string{seen[0].key})
				if s, ok := it.Value.(string); err != nil || !ok || len(s) != 32 {
					t.Errorf("added key %q is not a String of 32 hex digits", seen[0].key)
				}
				if req.Header.Get("Idempotency-Key") != "" {
					t.Error("the caller's request was modified")
				}
			}
		})
	}
}

func TestTransportGivesUpAfterMaxAttempts(t *testing.T) {
	var log clientLog
	srv := httptest.NewServer(log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0.01")
		w.WriteHeader(http.StatusTooManyRequests)
	})))
	defer srv.Close()
	for _, tc := range []struct{ max, want int }{{0, 4}, {1, 1}, {6, 6}} {
		before := len(log.list())
		c := clientTransport(t, pacer.Config{Base: srv.Client().Transport, MaxAttempts: tc.max})
		resp, err := c.Get(srv.URL + "/x")
		if resp != nil {
			t.Fatalf("got a response %d", resp.StatusCode)
		}
		var ue *url.Error
		if !errors.As(err, &ue) {
			t.Fatalf("http.Client returned %T", err)
		}
		re := clientRetryErr(t, err)
		if re.Attempts != tc.want || len(re.Failures) != tc.want || len(log.list())-before != tc.want {
			t.Fatalf("MaxAttempts %d: %d attempts, %d failures, server saw %d; want %d", tc.max, re.Attempts, len(re.Failures), len(log.list())-before, tc.want)
		}
		for _, f := range re.Failures {
			if f.Status != 429 || f.Wait != 10*time.Millisecond || f.Err != nil {
				t.Errorf("failure %+v; want 429 with a 10ms wait", f)
			}
		}
		if !errors.Is(err, pacer.ErrAttemptsExhausted) || re.Method != "GET" || re.URL != srv.URL+"/x" {
			t.Errorf("error %v", err)
		}
		wantMsg := strconv.Itoa(tc.want) + " attempt"
		if !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), "(429") || !strings.Contains(err.Error(), "attempts exhausted") {
			t.Errorf("message %q does not say %q, the statuses and the reason", err, wantMsg)
		}
		if re.Waited < time.Duration(tc.want-1)*10*time.Millisecond {
			t.Errorf("waited %v over %d retries of 10ms", re.Waited, tc.want-1)
		}
	}
}

func TestTransportRetryAfterForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		ra   func(now time.Time) string
		want time.Duration
	}{
		{"delay-seconds", func(time.Time) string { return "3" }, 3 * time.Second},
		{"decimal seconds", func(time.Time) string { return "1.25" }, 1250 * time.Millisecond},
		{"IMF-fixdate", func(now time.Time) string { return now.Add(4 * time.Second).UTC().Format(http.TimeFormat) }, 4 * time.Second},
		{"RFC 850 date", func(now time.Time) string {
			return now.Add(5 * time.Second).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT")
		}, 5 * time.Second},
		{"asctime date", func(now time.Time) string { return now.Add(6 * time.Second).UTC().Format(time.ANSIC) }, 6 * time.Second},
		{"date in the past", func(now time.Time) string { return now.Add(-time.Minute).UTC().Format(http.TimeFormat) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
					if n == 0 {
						w.Header().Set("Retry-After", tc.ra(time.Now()))
						w.WriteHeader(http.StatusTooManyRequests)
					}
				})))
				c := clientTransport(t, pacer.Config{Base: base})
				if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
					t.Fatalf("%d, %v", code, err)
				}
				seen := log.list()
				if len(seen) != 2 {
					t.Fatalf("%d attempts; want 2", len(seen))
				}
				if d := seen[1].at.Sub(seen[0].at); d != tc.want {
					t.Errorf("retried after %v; want %v", d, tc.want)
				}
			})
		})
	}
}

// TestTransportRetryAfterPrecedence: Retry-After wins over the RateLimit
// t of a 429; without it, the t of the exhausted policy times the retry.
func TestTransportRetryAfterPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"Retry-After and t", map[string]string{"Retry-After": "2", "RateLimit": `"api";r=0;t=5`}, 2 * time.Second},
		{"t alone", map[string]string{"RateLimit": `"other";r=3;t=9, "api";r=0;t=5`}, 5 * time.Second},
		{"legacy reset alone", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4"}, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
					if n == 0 {
						for k, v := range tc.header {
							w.Header().Set(k, v)
						}
						w.WriteHeader(http.StatusTooManyRequests)
					}
				})))
				c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true})
				if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
					t.Fatalf("%d, %v", code, err)
				}
				seen := log.list()
				if len(seen) != 2 {
					t.Fatalf("%d attempts; want 2", len(seen))
				}
				if d := seen[1].at.Sub(seen[0].at); d != tc.want {
					t.Errorf("retried after %v; want %v", d, tc.want)
				}
			})
		})
	}
}

// TestTransportBackoffFullJitter checks the waits when the server names
// none: uniform in [0, min(cap, base·2^n)].
func TestTransportBackoffFullJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
		})))
		c := clientTransport(t, pacer.Config{Base: base, MaxAttempts: 5, BackoffBase: time.Second, BackoffCap: 4 * time.Second})
		bounds := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
		const runs = 300
		waits := make([][]float64, len(bounds))
		for range runs {
			before := len(log.list())
			_, err := clientGet(t, c, srv.URL+"/")
			if !errors.Is(err, pacer.ErrAttemptsExhausted) {
				t.Fatalf("error %v", err)
			}
			seen := log.list()[before:]
			if len(seen) != 5 {
				t.Fatalf("%d attempts; want 5", len(seen))
			}
			for i := 1; i < len(seen); i++ {
				d := seen[i].at.Sub(seen[i-1].at)
				if d < 0 || d > bounds[i-1] {
					t.Fatalf("wait before retry %d: %v, outside [0, %v]", i, d, bounds[i-1])
				}
				waits[i-1] = append(waits[i-1], float64(d)/float64(bounds[i-1]))
			}
		}
		for i, ws := range waits {
			lo, hi, sum := 1.0, 0.0, 0.0
			for _, w := range ws {
				lo, hi, sum = min(lo, w), max(hi, w), sum+w
			}
			if mean := sum / float64(len(ws)); mean < 0.4 || mean > 0.6 || lo > 0.1 || hi < 0.9 {
				t.Errorf("retry %d: waits/bound mean %.3f, min %.3f, max %.3f; want a uniform spread over [0, 1]", i+1, mean, lo, hi)
			}
		}
	})
}

// clientBodies are request bodies a test resends: every kind
// http.NewRequest knows how to replay, and one it does not.
func clientBodies() map[string]func() io.Reader {
	return map[string]func() io.Reader{
		"bytes.Buffer":   func() io.Reader { return bytes.NewBufferString("same-bytes") },
		"bytes.Reader":   func() io.Reader { return bytes.NewReader([]byte("same-bytes")) },
		"strings.Reader": func() io.Reader { return strings.NewReader("same-bytes") },
	}
}

func TestTransportResendsSameBytesAndKey(t *testing.T) {
	for name, body := range clientBodies() {
		for _, key := range []string{`"caller-key"`, ""} {
			t.Run(name+" key="+key, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var log clientLog
					srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF, clientFixed(1, 10*time.Second))))
					c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true, AddIdempotencyKey: true})
					if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
						t.Fatalf("first request: %d, %v", code, err)
					}
					req, _ := http.NewRequest("POST", srv.URL+"/", body())
					if key != "" {
						req.Header.Set("Idempotency-Key", key)
					}
					if code, err := clientCall(c, req); code != 200 || err != nil {
						t.Fatalf("POST: %d, %v", code, err)
					}
					seen := log.list()[1:]
					if len(seen) != 2 || seen[0].status != 429 || seen[1].status != 200 {
						t.Fatalf("server saw %+v; want a 429 then a 200", seen)
					}
					for i, s := range seen {
						if s.body != "same-bytes" || s.key == "" || s.key != seen[0].key || (key != "" && s.key != key) {
							t.Errorf("attempt %d: body %q key %q", i, s.body, s.key)
						}
					}
				})
			})
		}
	}
}

// TestTransportDoesNotResendUnreplayableBodies: a body without GetBody is
// sent once; the 429 (or network error) is reported, not retried.
func TestTransportDoesNotResendUnreplayableBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF, clientFixed(1, 10*time.Second))))
		c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true})
		if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
			t.Fatalf("first request: %d, %v", code, err)
		}
		req, _ := http.NewRequest("PUT", srv.URL+"/", io.MultiReader(strings.NewReader("once")))
		if req.GetBody != nil {
			t.Fatal("the body is replayable after all")
		}
		_, err := clientCall(c, req)
		re := clientRetryErr(t, err)
		if !errors.Is(err, pacer.ErrBodyNotReplayable) || re.Attempts != 1 || re.Failures[0].Status != 429 {
			t.Fatalf("error %v", err)
		}
		if n := len(log.list()); n != 2 {
			t.Errorf("server saw %d requests; want 2", n)
		}
	})
}

func TestTransportMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
			if n < 2 {
				w.Header().Set("Retry-After", "300")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})))
		// Default MaxWait is 2 minutes: a 5-minute Retry-After ends the
		// request at once.
		c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true})
		start := time.Now()
		_, err := clientGet(t, c, srv.URL+"/")
		re := clientRetryErr(t, err)
		if !errors.Is(err, pacer.ErrWaitTooLong) || re.Attempts != 1 || re.Failures[0].Wait != 300*time.Second {
			t.Fatalf("error %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("gave up after %v; want at once", d)
		}
		// Within a larger MaxWait it is honoured.
		c = clientTransport(t, pacer.Config{Base: base, DisablePacing: true, MaxWait: 10 * time.Minute})
		start = time.Now()
		if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
			t.Fatalf("%d, %v", code, err)
		}
		if d := time.Since(start); d != 300*time.Second {
			t.Errorf("took %v; want 300s", d)
		}
	})
}

func TestTransportContext(t *testing.T) {
	retryAfter := func(ra string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", ra)
			w.WriteHeader(http.StatusTooManyRequests)
		})
	}
	t.Run("cancel ends a wait at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, base := startClientMemServer(t, retryAfter("10"))
			c := clientTransport(t, pacer.Config{Base: base})
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(time.Second, cancel)
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/", nil)
			start := time.Now()
			_, err := clientCall(c, req)
			if d := time.Since(start); d != time.Second {
				t.Errorf("returned after %v; want 1s, when the context was cancelled", d)
			}
			re := clientRetryErr(t, err)
			if !errors.Is(err, context.Canceled) || re.Attempts != 1 {
				t.Errorf("error %v", err)
			}
		})
	})
	t.Run("a wait past the deadline is not started", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, base := startClientMemServer(t, retryAfter("10"))
			c := clientTransport(t, pacer.Config{Base: base})
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/", nil)
			start := time.Now()
			_, err := clientCall(c, req)
			if d := time.Since(start); d != 0 {
				t.Errorf("returned after %v; want at once", d)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, pacer.ErrWaitPastDeadline) {
				t.Errorf("error %v", err)
			}
		})
	})
	t.Run("the total wait is capped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, base := startClientMemServer(t, retryAfter("3"))
			c := clientTransport(t, pacer.Config{Base: base, MaxTotalWait: 5 * time.Second})
			start := time.Now()
			_, err := clientGet(t, c, srv.URL+"/")
			re := clientRetryErr(t, err)
			if !errors.Is(err, pacer.ErrTotalWaitExceeded) || re.Attempts != 2 || re.Waited != 3*time.Second {
				t.Errorf("error %v, %+v", err, re)
			}
			if d := time.Since(start); d != 3*time.Second {
				t.Errorf("returned after %v; want 3s", d)
			}
		})
	})
	t.Run("a request given up before its first attempt has its body closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, base := startClientMemServer(t, clientScript(func(n int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("RateLimit", `"api";r=0;t=60`)
			}))
			c := clientTransport(t, pacer.Config{Base: base})
			if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil {
				t.Fatalf("%d, %v", code, err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			body := &clientClosingBody{Reader: strings.NewReader("x")}
			req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/", body)
			_, err := clientCall(c, req)
			re := clientRetryErr(t, err)
			if !errors.Is(err, pacer.ErrWaitPastDeadline) || re.Attempts != 0 {
				t.Errorf("error %v", err)
			}
			if !body.closed.Load() {
				t.Error("the request body was not closed")
			}
		})
	})
}

type clientClosingBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *clientClosingBody) Close() error {
	b.closed.Store(true)
	return nil
}

// TestTransportPermanentErrors: errors a retry cannot fix end the request
// after one attempt.
func TestTransportPermanentErrors(t *testing.T) {
	var log clientLog
	srv := httptest.NewUnstartedServer(log.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	c := clientTransport(t, pacer.Config{Base: &http.Transport{}, BackoffBase: time.Millisecond})
	_, err := clientGet(t, c, srv.URL+"/") // the test certificate is not trusted
	re := clientRetryErr(t, err)
	if !errors.Is(err, pacer.ErrPermanent) || re.Attempts != 1 {
		t.Errorf("untrusted certificate: %v", err)
	}
	_, err = clientGet(t, c, "gopher://127.0.0.1/")
	if re := clientRetryErr(t, err); !errors.Is(err, pacer.ErrPermanent) || re.Attempts != 1 {
		t.Errorf("unsupported scheme: %v", err)
	}
}

func TestNewTransportValidates(t *testing.T) {
	_, err := pacer.New(pacer.Config{MaxAttempts: -1, BackoffBase: -1, MaxWait: -1, MaxTotalWait: -1, MaxReset: -1})
	var ce *core.ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 5 {
		t.Fatalf("error %v; want 5 problems", err)
	}
	_, err = pacer.New(pacer.Config{BackoffBase: time.Minute, BackoffCap: time.Second})
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || !strings.Contains(err.Error(), "backoff cap") {
		t.Fatalf("error %v; want the cap below the base", err)
	}
	if _, err := pacer.New(pacer.Config{}); err != nil {
		t.Fatal(err)
	}
}
