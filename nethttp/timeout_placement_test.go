package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// TestConcurrencyBehindTimeout: a concurrency layer placed behind a
// timeout middleware (http.TimeoutHandler outside, the layer inside)
// holds a handler's slot until the handler returns, even after the
// timeout answered; placed in front of it, the layer gives the slot back
// when the timeout answers, while the handler runs on (what the docs
// state: docs/semantics.md, Concurrency budgets).
func TestConcurrencyBehindTimeout(t *testing.T) {
	newLayer := func() func(http.Handler) http.Handler {
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: []core.Budget{
			{Name: "exports", Algorithm: core.Concurrency, Quota: 1, Window: time.Minute, Key: keyfunc.Global()},
		}})
		return nethttp.MustMiddleware(eng, core.Use("exports"))
	}
	// stuck ignores its context: it returns when the test lets it.
	type stuck struct {
		running, most atomic.Int64
		release       chan struct{}
	}
	newStuck := func() *stuck { return &stuck{release: make(chan struct{})} }
	handler := func(s *stuck) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := s.running.Add(1)
			for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
			}
			<-s.release
			s.running.Add(-1)
		})
	}
	get := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const after = 100 * time.Millisecond
	// waitRunning waits until n handlers run: the timeout may answer
	// before its goroutine ran the chain on a busy machine.
	waitRunning := func(s *stuck, n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); s.running.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d handlers running, want %d", s.running.Load(), n)
			}
		}
	}

	t.Run("behind the timeout", func(t *testing.T) {
		s := newStuck()
		srv := httptest.NewServer(http.TimeoutHandler(newLayer()(handler(s)), after, "timeout"))
		defer srv.Close()
		defer close(s.release)
		if code := get(srv.URL); code != http.StatusServiceUnavailable {
			t.Fatalf("first request: %d, want the timeout's 503", code)
		}
		waitRunning(s, 1)
		// The handler runs on and holds the only slot.
		if code := get(srv.URL); code != http.StatusTooManyRequests {
			t.Errorf("second request while the first handler runs on: %d, want 429", code)
		}
		if m := s.most.Load(); m != 1 {
			t.Errorf("%d handlers ran at once with one slot", m)
		}
	})
	t.Run("in front of the timeout", func(t *testing.T) {
		s := newStuck()
		srv := httptest.NewServer(newLayer()(http.TimeoutHandler(handler(s), after, "timeout")))
		defer srv.Close()
		defer close(s.release)
		for i := range int64(2) {
			if code := get(srv.URL); code != http.StatusServiceUnavailable {
				t.Fatalf("request: %d, want the timeout's 503", code)
			}
			waitRunning(s, i+1)
		}
		if m := s.most.Load(); m != 2 {
			t.Errorf("%d handlers ran at once; the layer in front of the timeout gives the slot back at the timeout's answer, so 2 were expected", m)
		}
	})
}
