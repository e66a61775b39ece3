//go:build !race

package fibermw_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/log"
	"github.com/gofiber/fiber/v2/middleware/timeout"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw"
)

// TestTimeoutNeverAnswersAnotherRequest is ginmw's test of that name for
// Fiber v2's timeout middleware: a route behind it (the timeout around a
// concurrency layer, then a handler that outlasts the timeout) times out
// all the while, under load, and requests of a route without a timeout,
// behind the same group layer, are answered by their own handler, every
// one. timeout.New runs the layer and the handler on a goroutine of its
// own with the request's *fiber.Ctx, which Fiber recycles for another
// request once the middleware returned; timeout.NewWithContext runs them
// on the request's goroutine. (Not under the race detector, see
// race_on_test.go.)
func TestTimeoutNeverAnswersAnotherRequest(t *testing.T) {
	var logs syncBuffer
	log.SetOutput(&logs)
	t.Cleanup(func() { log.SetOutput(nil) })

	t.Run("New", func(t *testing.T) {
		timeoutNeverAnswersAnotherRequest(t, &logs,
			func(h fiber.Handler, d time.Duration) fiber.Handler {
				return timeout.New(h, d) //nolint:staticcheck // the middleware under test, deprecated for its races
			},
			func(*fiber.Ctx) error {
				// Outlast the timeout; touch c no more. The user context
				// has no deadline under timeout.New: sleep past it (the
				// timeout started before the layer and the handler).
				time.Sleep(6 * time.Millisecond)
				return nil
			})
	})
	t.Run("NewWithContext", func(t *testing.T) {
		timeoutNeverAnswersAnotherRequest(t, &logs, func(h fiber.Handler, d time.Duration) fiber.Handler {
			return timeout.NewWithContext(h, d)
		}, func(c *fiber.Ctx) error {
			// Wait for the deadline NewWithContext put on the user
			// context and return its error, which NewWithContext turns
			// into 408 (this runs on the request's goroutine).
			ctx := c.UserContext()
			<-ctx.Done()
			time.Sleep(time.Millisecond)
			return ctx.Err()
		})
	})
}

func timeoutNeverAnswersAnotherRequest(t *testing.T, logs *syncBuffer, withTimeout func(fiber.Handler, time.Duration) fiber.Handler, handler fiber.Handler) {
	logsBefore := len(logs.String())
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.FixedWindow, Quota: 1 << 30, Window: time.Hour, Key: constKey},
		{Name: "inflight", Algorithm: core.Concurrency, Quota: 100000, Window: time.Minute, Key: constKey},
	}})
	none := core.Headers(core.HeadersNone)
	a := fiber.New(fiber.Config{DisableStartupMessage: true})
	g := a.Group("/", fibermw.MustMiddleware(eng, core.Use("outer"), none))
	g.Get("/slow",
		withTimeout(fibermw.MustMiddleware(eng, core.Use("inflight"), none), 5*time.Millisecond),
		handler)
	g.Get("/fast", func(c *fiber.Ctx) error { return c.SendString("ok") })
	base := listen(t, a)
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 16},
		Timeout:   10 * time.Second,
	}
	t.Cleanup(client.CloseIdleConnections)

	get := func(path string) (int, string, error) {
		resp, err := client.Get(base + path)
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
	if n := slowStatusSeen[fiber.StatusRequestTimeout]; n == 0 {
		t.Errorf("no /slow request answered 408 of %d: %v", slow.Load(), slowStatusSeen)
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d requests to /fast and %d to /slow answered otherwise than by their own handler or the timeout, e.g. %q",
			len(wrong), fast.Load(), slow.Load(), wrong[:min(len(wrong), 5)])
	}
	if s := logs.String()[logsBefore:]; strings.Contains(s, "recover error") || strings.Contains(s, "handler error") {
		t.Errorf("errors behind the timeout (%d recovered panics, %d handler errors):\n%.1500s",
			strings.Count(s, "recover error"), strings.Count(s, "handler error"), s)
	}
}
