package pacer_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// TestTransportSharedConcurrency: a concurrency budget in the transport's
// layer holds a slot per attempt in flight and gives it back when the
// attempt is answered, so sequential requests never wait, and concurrent
// ones never exceed the slots.
func TestTransportSharedConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inFlight, peak atomic.Int64
		srv, base := startClientMemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(100 * time.Millisecond)
		}))
		budget := core.Budget{Name: "api", Algorithm: core.Concurrency, Quota: 2, Window: time.Minute, Key: clientConstKey}
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: []core.Budget{budget}})
		c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true, Layer: eng.MustLayer(core.Use("api"))})
		start := time.Now()
		clientSequential(t, c, srv.URL+"/", 3)
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Errorf("3 sequential requests took %v; want 300ms (no slot kept)", d)
		}
		clientWorkers(t, []*http.Client{c}, 6, 1, srv.URL+"/")
		if p := peak.Load(); p != 2 {
			t.Errorf("%d attempts in flight at once; want 2", p)
		}
		p, err := eng.Peek(context.Background(), "all", "api")
		if err != nil || p[0].Remaining != 2 {
			t.Errorf("after the requests: %+v %v", p, err)
		}
	})
}

// panicOnce is a base transport that panics on its first attempt and
// sends the others through base.
type panicOnce struct {
	base     http.RoundTripper
	panicked atomic.Bool
}

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.panicked.CompareAndSwap(false, true) {
		panic("base transport")
	}
	return p.base.RoundTrip(r)
}

// TestBasePanicEndsTheAttempt: an attempt whose base transport panics
// passes the panic on and still ends: its pacing reservation and its slot
// of the layer's concurrency budget are given back, so the next request
// neither waits for an answer that will never come nor finds the slot
// held.
func TestBasePanicEndsTheAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, base := startClientMemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// One unit left of two until the reset: the pacing state
			// lets one attempt at a time go.
			w.Header().Set("RateLimit-Policy", `"p";q=2;w=60`)
			w.Header().Set("RateLimit", `"p";r=1;t=60`)
		}))
		budget := core.Budget{Name: "api", Algorithm: core.Concurrency, Quota: 1, Window: time.Minute, Key: clientConstKey}
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: []core.Budget{budget}})
		pb := &panicOnce{base: base, panicked: atomic.Bool{}}
		pb.panicked.Store(true) // the first request teaches the pacing state
		c := clientTransport(t, pacer.Config{Base: pb, Layer: eng.MustLayer(core.Use("api")), MaxTotalWait: time.Minute})
		clientSequential(t, c, srv.URL+"/", 1)
		pb.panicked.Store(false)
		func() {
			defer func() {
				if r := recover(); r != "base transport" {
					t.Errorf("recovered %v, want the base transport's panic", r)
				}
			}()
			_, _ = clientGet(t, c, srv.URL+"/")
		}()
		start := time.Now()
		if code, err := clientGet(t, c, srv.URL+"/"); code != 200 || err != nil || time.Since(start) != 0 {
			t.Errorf("the request after the panic: %d %v after %v; want 200 at once", code, err, time.Since(start))
		}
		if p, err := eng.Peek(context.Background(), "all", "api"); err != nil || p[0].Remaining != 1 {
			t.Errorf("after the requests: %+v %v; want the slot free", p, err)
		}
	})
}
