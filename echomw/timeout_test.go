//go:build !race

package echomw_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/echomw"
)

// TestTimeoutNeverAnswersAnotherRequest is ginmw's test of that name for
// Echo v4's Timeout middleware: a route behind it (the timeout, then a
// concurrency layer, then a handler that outlasts the timeout) times out
// all the while, under load, and requests of a route without a timeout,
// behind the same group layer, are answered by their own handler, every
// one. Echo's Timeout runs the rest of the chain on http.TimeoutHandler's
// goroutine with the request's echo.Context, which Echo gives to another
// request once the middleware returned. (Not under the race detector, see
// race_on_test.go.)
func TestTimeoutNeverAnswersAnotherRequest(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.FixedWindow, Quota: 1 << 30, Window: time.Hour, Key: constKey},
		{Name: "inflight", Algorithm: core.Concurrency, Quota: 100000, Window: time.Minute, Key: constKey},
	}})
	none := core.Headers(core.HeadersNone)

	// http.TimeoutHandler drops a panic of its handler's goroutine once it
	// answered the request: record them, just inside the timeout.
	var (
		panicMu sync.Mutex
		panics  []string
	)
	watch := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			defer func() {
				if v := recover(); v != nil {
					panicMu.Lock()
					panics = append(panics, fmt.Sprint(v))
					panicMu.Unlock()
					panic(v)
				}
			}()
			return next(c)
		}
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	g := e.Group("", echomw.MustMiddleware(eng, core.Use("outer"), none))
	g.GET("/slow", func(c echo.Context) error {
		// Outlast the timeout; touch c no more. The context is
		// http.TimeoutHandler's, which ends at the timeout.
		ctx := c.Request().Context()
		<-ctx.Done()
		time.Sleep(time.Millisecond)
		return ctx.Err()
	},
		middleware.TimeoutWithConfig(middleware.TimeoutConfig{Timeout: 5 * time.Millisecond}), //nolint:staticcheck // the middleware under test, deprecated for its races
		watch,
		echomw.MustMiddleware(eng, core.Use("inflight"), none))
	g.GET("/fast", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 10 * time.Second
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 16

	get := func(path string) (int, string, error) {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var (
		wg             sync.WaitGroup
		fast, slow     atomic.Int64
		mu             sync.Mutex
		wrong          []string
		fastWrong      = map[string]int{}
		slowStatusSeen = map[int]int{}
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		wrong = append(wrong, s)
		fastWrong[s]++
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				status, body, err := get("/fast")
				fast.Add(1)
				switch {
				case err != nil:
					note(err.Error())
				case status != http.StatusOK || body != "ok":
					note(fmt.Sprintf("%d %q", status, body))
				}
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				status, _, err := get("/slow")
				slow.Add(1)
				mu.Lock()
				if err != nil {
					wrong = append(wrong, "/slow: "+err.Error())
				} else {
					slowStatusSeen[status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond) // let the last handlers behind the timeout return
	t.Logf("%d requests to /fast, %d to /slow; /slow statuses %v; wrong answers to /fast by kind %v",
		fast.Load(), slow.Load(), slowStatusSeen, fastWrong)
	if n := slowStatusSeen[http.StatusServiceUnavailable]; n == 0 {
		t.Errorf("no /slow request answered 503 of %d: %v", slow.Load(), slowStatusSeen)
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d requests to /fast and %d to /slow answered otherwise than by their own handler or the timeout, e.g. %q",
			len(wrong), fast.Load(), slow.Load(), wrong[:min(len(wrong), 5)])
	}
	panicMu.Lock()
	defer panicMu.Unlock()
	if len(panics) > 0 {
		t.Errorf("%d panics behind the timeout, e.g. %q", len(panics), panics[:min(len(panics), 5)])
	}
}
