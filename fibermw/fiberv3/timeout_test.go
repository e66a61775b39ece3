package fiberv3_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/log"
	"github.com/gofiber/fiber/v3/middleware/timeout"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
)

// syncBuffer is a log output that several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A shaping layer behind Fiber's timeout middleware, whose waits outlast
// the timeout, then a concurrency budget: the waits the timeout cuts short
// end without a panic (the nil dereference in Deny, once the first
// layer had returned the state to the pool), and every slot comes back.
func TestTimeoutShapingNoPanic(t *testing.T) {
	var logs syncBuffer
	log.SetOutput(&logs)
	t.Cleanup(func() { log.SetOutput(nil) })
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	eng := core.MustNew(core.Config{Store: ms, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.SlidingLog, Quota: 1000, Window: time.Hour, Key: constKey},
		{Name: "shape", Algorithm: core.LeakyBucket, Quota: 1, Window: 100 * time.Millisecond, MaxWait: 10 * time.Second, Key: constKey},
		{Name: "exports", Algorithm: core.Concurrency, Quota: 2, Window: time.Minute, Key: constKey},
	}})
	// No header fields: the middleware copies the response when the time
	// is up, which races with any field written before.
	none := core.Headers(core.HeadersNone)
	var entered, returned atomic.Int64
	a := fiber.New()
	a.Use(fiberv3.MustMiddleware(eng, core.Use("outer"), none))
	a.Post("/x",
		timeout.New(fiberv3.MustMiddleware(eng, core.Use("shape"), none), timeout.Config{Timeout: 100 * time.Millisecond}),
		fiberv3.MustMiddleware(eng, core.Use("exports"), none),
		func(c fiber.Ctx) error {
			entered.Add(1)
			defer returned.Add(1)
			<-c.Context().Done()
			return c.Context().Err()
		})
	base := listen(t, a)
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Post(base+"/x", "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			if res.StatusCode != fiber.StatusRequestTimeout && res.StatusCode != fiber.StatusTooManyRequests {
				t.Errorf("status %d, want the timeout's 408 or the concurrency budget's 429", res.StatusCode)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := eng.Peek(context.Background(), "k", "exports", "shape")
		if err != nil {
			t.Fatal(err)
		}
		if p[0].Remaining == 2 && p[1].Remaining == p[1].Limit.Quota && returned.Load() == entered.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after the requests: %d of 2 slots free, shaping budget at %d of %d, %d of %d handlers returned",
				p[0].Remaining, p[1].Remaining, p[1].Limit.Quota, returned.Load(), entered.Load())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := logs.String(); strings.Contains(s, "panic") {
		t.Errorf("a layer behind the timeout panicked:\n%.600s", s)
	}
}
