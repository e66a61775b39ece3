package pacer_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/nethttp"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// The load test: 32 goroutines send 500 requests in all through one client
// to a server that quotagate limits to 100 requests per 10 s with a fixed
// window aligned to the Unix epoch.
const (
	loadWorkers  = 32
	loadRequests = 500
	loadQuota    = 100
	loadWindow   = 10 * time.Second
)

// clientLeastTime is the least time in which n requests started at start
// can all be admitted by a fixed window of quota q per w aligned to the
// Unix epoch: the current window admits q more, each later window q, so
// the n-th request is admitted at the start of window floor((n-1)/q)
// counted from the current one. From a start 3 s into a window, 500
// requests at 100 per 10 s need 37 s, not 40 s or 50 s.
func clientLeastTime(start time.Time, n, q int, w time.Duration) time.Duration {
	ns := start.UnixNano()
	windowStart := ns - ns%int64(w)
	last := windowStart + int64((n-1)/q)*int64(w)
	return time.Duration(last - ns)
}

// clientLoadStats is what the server saw and what the workers got.
type clientLoadStats struct {
	attempts, refused atomic.Int64 // requests the server answered, and with 429
	completed, failed atomic.Int64 // requests that ended 2xx, or otherwise
	elapsed           time.Duration
	least             time.Duration
}

func (s *clientLoadStats) String() string {
	return fmt.Sprintf("completed %d/%d, failed %d, attempts %d, 429s %d (%.1f%%), time %.2fs (least %.2fs, +%.1f%%)",
		s.completed.Load(), loadRequests, s.failed.Load(), s.attempts.Load(), s.refused.Load(),
		100*float64(s.refused.Load())/float64(max(1, s.attempts.Load())),
		s.elapsed.Seconds(), s.least.Seconds(), 100*(s.elapsed.Seconds()/s.least.Seconds()-1))
}

// clientLoadHandler is the limited server: quotagate's middleware with a
// fixed window of 100 per 10 s, counting what it answers.
func clientLoadHandler(st *clientLoadStats) http.Handler {
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{
		Name: "api", Algorithm: core.FixedWindow, Quota: loadQuota, Window: loadWindow,
		Key: func(*core.Request) (string, error) { return "all", nil },
	}}})
	limited := nethttp.MustMiddleware(eng, core.Use("api"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &clientStatusWriter{ResponseWriter: w, onStatus: func(code int) {
			st.attempts.Add(1)
			if code == http.StatusTooManyRequests {
				st.refused.Add(1)
			}
		}}
		limited.ServeHTTP(rec, r)
		rec.finish()
	})
}

// clientStatusWriter reports the status of a response before any of it
// is sent, so that a client never sees a response its server has not yet
// counted.
type clientStatusWriter struct {
	http.ResponseWriter
	onStatus func(code int)
	status   int
	hijacked bool
}

func (w *clientStatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.onStatus(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *clientStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// finish reports the implicit 200 of a handler that wrote nothing.
func (w *clientStatusWriter) finish() {
	if w.status == 0 && !w.hijacked {
		w.WriteHeader(http.StatusOK)
	}
}

// Hijack lets a test handler drop the connection; such a response has
// status 0.
func (w *clientStatusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// clientLoadRun sends the load through c and records the outcome in st.
func clientLoadRun(c *http.Client, url string, st *clientLoadStats) {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	st.least = clientLeastTime(start, loadRequests, loadQuota, loadWindow)
	for range loadWorkers {
		wg.Go(func() {
			for next.Add(1) <= loadRequests {
				resp, err := c.Get(url)
				if err != nil {
					st.failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					st.completed.Add(1)
				} else {
					st.failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st.elapsed = time.Since(start)
}

// clientCheckLoad asserts the load-test targets on the transport's run.
func clientCheckLoad(t *testing.T, st *clientLoadStats) {
	t.Helper()
	if got := st.completed.Load(); got != loadRequests {
		t.Errorf("%d of %d requests completed (%d failed)", got, loadRequests, st.failed.Load())
	}
	if r, a := st.refused.Load(), st.attempts.Load(); float64(r) > 0.05*float64(a) {
		t.Errorf("%d of %d attempts were answered 429; want at most 5%%", r, a)
	}
	if st.elapsed < st.least {
		t.Errorf("the run took %v, less than the server allows (%v): the server's limit was not enforced", st.elapsed, st.least)
	}
	if float64(st.elapsed) > 1.15*float64(st.least) {
		t.Errorf("the run took %v; want within 15%% of the least time %v", st.elapsed, st.least)
	}
}

func clientRetryable(base http.RoundTripper) *http.Client {
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: base}
	rc.Logger = nil
	return rc.StandardClient()
}

// TestTransportLoadFakeTime runs the load test on fake time: server and
// client run in a synctest bubble over an in-memory network, so the
// server's fixed window is on the same fake clock. The bubble starts at
// 2000-01-01T00:00:00Z, on a window boundary; the other runs start at
// offsets into the window, where t's rounding up to whole seconds costs
// the client up to a second per window.
func TestTransportLoadFakeTime(t *testing.T) {
	for _, offset := range []time.Duration{0, 2500 * time.Millisecond, 7 * time.Second, 9100 * time.Millisecond, 9900 * time.Millisecond} {
		t.Run(fmt.Sprintf("offset=%v", offset), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(offset)
				var st clientLoadStats
				srv, base := startClientMemServer(t, clientLoadHandler(&st))
				c := &http.Client{Transport: pacer.MustNew(pacer.Config{Base: base})}
				clientLoadRun(c, srv.URL+"/load", &st)
				t.Logf("quotagate Transport: %v", &st)
				clientCheckLoad(t, &st)
			})
		})
	}
}

// TestTransportLoadFakeTimeRetryablehttp runs the same load with
// go-retryablehttp's defaults, for comparison. It asserts only that the
// server enforced its limit.
func TestTransportLoadFakeTimeRetryablehttp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var st clientLoadStats
		srv, base := startClientMemServer(t, clientLoadHandler(&st))
		clientLoadRun(clientRetryable(base), srv.URL+"/load", &st)
		t.Logf("go-retryablehttp: %v", &st)
		if st.elapsed < st.least {
			t.Errorf("the run took %v, less than the server allows (%v)", st.elapsed, st.least)
		}
	})
}

// TestTransportLoadRealTime runs the load test on real time over loopback
// TCP, first with the quotagate Transport, then with go-retryablehttp, each
// against a fresh server. It takes about 80 s, so -short skips it.
func TestTransportLoadRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("the real-time load test takes about 80 s; run without -short")
	}
	var st clientLoadStats
	srv := httptest.NewServer(clientLoadHandler(&st))
	defer srv.Close()
	c := &http.Client{Transport: pacer.MustNew(pacer.Config{Base: srv.Client().Transport})}
	clientLoadRun(c, srv.URL+"/load", &st)
	t.Logf("quotagate Transport: %v", &st)
	clientCheckLoad(t, &st)

	var rst clientLoadStats
	rsrv := httptest.NewServer(clientLoadHandler(&rst))
	defer rsrv.Close()
	clientLoadRun(clientRetryable(rsrv.Client().Transport), rsrv.URL+"/load", &rst)
	t.Logf("go-retryablehttp:    %v", &rst)
	if rst.elapsed < rst.least {
		t.Errorf("go-retryablehttp's run took %v, less than the server allows (%v)", rst.elapsed, rst.least)
	}
}
