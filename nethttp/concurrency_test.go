package nethttp_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// A streaming response holds its slot until the handler returns, however
// much of the body the client has already read.
func TestConcurrencyStreamingHoldsSlot(t *testing.T) {
	release := make(chan struct{})
	f := newFixture(t, []core.Budget{
		{Name: "streams", Algorithm: core.Concurrency, Quota: 1, Window: time.Minute, Key: keyfunc.Constant("all")},
	}, func(f *fixture, mux *http.ServeMux) {
		mw := nethttp.MustMiddleware(f.engine, core.Use("streams"))
		mux.Handle("/stream", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "first\n")
			_ = http.NewResponseController(w).Flush()
			<-release
			_, _ = io.WriteString(w, "second\n")
		})))
	})
	free := func() int64 {
		p, err := f.engine.Peek(context.Background(), "all", "streams")
		if err != nil {
			t.Fatal(err)
		}
		return p[0].Remaining
	}
	resp, err := f.srv.Client().Get(f.srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk %q, %v", line, err)
	}
	if resp.Header.Get(core.HeaderRateLimit) != `"streams";r=0` {
		t.Errorf("RateLimit %q", resp.Header.Get(core.HeaderRateLimit))
	}
	if n := free(); n != 0 {
		t.Errorf("%d free slots while the response streams, want 0", n)
	}
	if r := f.do("GET", "/stream"); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second stream: %d, want 429", r.StatusCode)
	}
	close(release)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for free() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the slot was not given back after the stream ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
