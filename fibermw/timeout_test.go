package fibermw_test

import (
	"bytes"
	"context"
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

// A shaping layer behind Fiber's timeout.New, whose waits outlast the
// timeout, then a concurrency budget: the waits that end after the
// timeout answered go no further and never panic (the nil
// dereference, once the first layer had returned the state to the pool),
// and every slot comes back. Skipped under the race detector, like the
// suite's TimeoutChain (see race_on_test.go).
func TestTimeoutShapingNoPanic(t *testing.T) {
	if timeoutStatus == 0 {
		t.Skip("timeout.New races with Fiber's release of the Ctx by design")
	}
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
	none := core.Headers(core.HeadersNone)
	release := make(chan struct{})
	var entered, returned atomic.Int64
	a := fiber.New(fiber.Config{DisableStartupMessage: true})
	a.Use(fibermw.MustMiddleware(eng, core.Use("outer"), none))
	a.Post("/x",
		timeout.New(fibermw.MustMiddleware(eng, core.Use("shape"), none), 100*time.Millisecond), //nolint:staticcheck // the middleware under test
		fibermw.MustMiddleware(eng, core.Use("exports"), none),
		func(*fiber.Ctx) error {
			// It outlasts the timeout, after which Fiber recycles the Ctx:
			// it touches it no more.
			entered.Add(1)
			defer returned.Add(1)
			<-release
			return nil
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
	close(release)
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
	time.Sleep(50 * time.Millisecond) // let the last shaped request finish after its wait
	if s := logs.String(); strings.Contains(s, "recover error") {
		t.Errorf("a layer behind the timeout panicked:\n%.600s", s)
	}
}
