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
