//go:build !race

package ginmw_test

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

	"github.com/gin-contrib/timeout"
	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/ginmw"
)

// TestTimeoutNeverAnswersAnotherRequest checks the placement
// docs/semantics.md gives for a concurrency layer with gin-contrib/timeout
// (timeout, then the layer, then the handler), under load: requests time
// out all the while and requests of a route without a timeout, behind the
// same group layer, are answered by their own handler, every one.
// gin-contrib/timeout before v1.2.1 returned at the timeout while the
// chain ran on with the request's *gin.Context, which Gin then gave to
// another request: when the handler returned, the chain went on through
// that request's handlers, which answered 200 with no body or not at all.
// (Not under the race detector: v1.2.1 still reads and writes the context
// from two goroutines, see race_on_test.go.)
func TestTimeoutNeverAnswersAnotherRequest(t *testing.T) {
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.FixedWindow, Quota: 1 << 30, Window: time.Hour, Key: constKey},
		{Name: "inflight", Algorithm: core.Concurrency, Quota: 100000, Window: time.Minute, Key: constKey},
	}})
	none := core.Headers(core.HeadersNone)
	r := gin.New()
	g := r.Group("/", ginmw.MustMiddleware(eng, core.Use("outer"), none))
	g.GET("/slow",
		timeout.New(timeout.WithTimeout(5*time.Millisecond)),
		ginmw.MustMiddleware(eng, core.Use("inflight"), none),
		func(c *gin.Context) {
			// Outlast the timeout; touch c no more.
			ctx := c.Request.Context()
			<-ctx.Done()
			time.Sleep(time.Millisecond)
		})
	g.GET("/fast", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 10 * time.Second

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
		slowStatusSeen = map[int]int{}
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		wrong = append(wrong, s)
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
	if n := slowStatusSeen[http.StatusRequestTimeout]; n == 0 {
		t.Errorf("no /slow request answered 408 of %d: %v", slow.Load(), slowStatusSeen)
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d requests to /fast and %d to /slow answered otherwise than by their own handler or the timeout, e.g. %q",
			len(wrong), fast.Load(), slow.Load(), wrong[:min(len(wrong), 5)])
	}
}
