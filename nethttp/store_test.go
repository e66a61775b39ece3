package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// TestLimitByOnSharedStore: two instances whose one-call LimitBy layers
// count in one Redis spend one budget, exactly (50 of 200 requests sent
// by 64 clients at once across both); when Redis goes away, each counts
// in its own memory, up to the quota (never unlimited).
func TestLimitByOnSharedStore(t *testing.T) {
	srv := redistest.Start(t)
	windowtest.ClearOfEdge(t, time.Hour) // the exact count needs one hour's window
	instance := func() string {
		st, client, err := redisstore.Open(srv.Addr(), redisstore.Config{Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		mw := nethttp.LimitBy(50, time.Hour, keyfunc.Global(), nethttp.Store(st))
		s := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
		t.Cleanup(s.Close)
		return s.URL
	}
	urls := []string{instance(), instance()}
	send := func(n, clients int) (ok, denied, other int64) {
		var wg sync.WaitGroup
		var next, okN, deniedN, otherN atomic.Int64
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					resp, err := http.Get(urls[i%2])
					if err != nil {
						otherN.Add(1)
						continue
					}
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						okN.Add(1)
					case http.StatusTooManyRequests:
						deniedN.Add(1)
					default:
						otherN.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return okN.Load(), deniedN.Load(), otherN.Load()
	}
	if ok, denied, other := send(200, 64); ok != 50 || denied != 150 || other != 0 {
		t.Fatalf("200 requests to two instances sharing a budget of 50: %d admitted, %d denied, %d other; want 50, 150, 0", ok, denied, other)
	}
	// Redis goes away: each instance counts in memory, so the next 200
	// admit at most 50 per instance.
	srv.Kill()
	if ok, _, other := send(200, 16); ok > 100 || ok == 0 || other != 0 {
		t.Errorf("with Redis gone: %d admitted, %d other; want 1 to 100 (at most the quota per instance), none unanswered", ok, other)
	}
}
