package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestConcurrencyAcrossInstances: 4 engines, each with its own client and
// store, × 8 goroutines take slots of one key (quota 5) and hold them a
// little: the requests in flight never exceed the quota, every slot is
// given back, and a token bucket spent in the same decisions is charged
// exactly once per admitted request (a denial by the concurrency budget
// charges nothing). Run with -race.
func TestConcurrencyAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	probe := newClient(t, srv.Addr())
	const quota, instances, workers, rounds = 5, 4, 8, 25
	const burst = 1000
	budgets := []core.Budget{
		{Name: "inflight", Algorithm: core.Concurrency, Quota: quota, Window: time.Minute, Key: constKey("shared")},
		// One unit per 100 hours: its remaining is burst minus the charges.
		{Name: "spent", Algorithm: core.TokenBucket, Quota: 1, Window: 100 * time.Hour, Burst: burst, Key: constKey("shared")},
	}
	const prefix = "conc:exact:"
	engines := make([]*core.Engine, instances)
	layers := make([]*core.Layer, instances)
	for i := range engines {
		st := mustStore(t, newClient(t, srv.Addr()), Config{Prefix: prefix, Timeout: 5 * time.Second})
		engines[i] = core.MustNew(core.Config{Store: st, Budgets: budgets, FailureMode: core.FailClosed, BreakerThreshold: -1})
		layers[i] = engines[i].MustLayer(core.Use("inflight", "spent"))
	}
	var held, peak, admitted, denied, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range instances {
		for range workers {
			wg.Add(1)
			go func(l *core.Layer) {
				defer wg.Done()
				var d core.Decision
				for range rounds {
					d.Reset()
					req := core.Request{Method: "POST", Path: "/", Context: context.Background()}
					l.Decide(&req, &d)
					switch {
					case d.Err != nil:
						errs.Add(1)
						continue
					case !d.Allowed:
						denied.Add(1)
						continue
					}
					admitted.Add(1)
					n := held.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(time.Millisecond)
					held.Add(-1)
					d.Done(context.Background(), 0)
				}
			}(layers[i])
		}
	}
	wg.Wait()
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d store errors", n)
	}
	if p := peak.Load(); p > quota {
		t.Errorf("%d requests in flight at once across instances, quota %d", p, quota)
	}
	t.Logf("admitted %d, denied %d, peak in flight %d", admitted.Load(), denied.Load(), peak.Load())
	if admitted.Load() == 0 || denied.Load() == 0 {
		t.Errorf("admitted %d, denied %d: the test did not contend", admitted.Load(), denied.Load())
	}
	p, err := engines[0].Peek(context.Background(), "shared", "inflight", "spent")
	if err != nil {
		t.Fatal(err)
	}
	if p[0].Remaining != quota {
		t.Errorf("%d free slots at the end, want %d", p[0].Remaining, quota)
	}
	if want := burst - admitted.Load(); p[1].Remaining != want {
		t.Errorf("token bucket: %d remaining, want %d (charged once per admitted request)", p[1].Remaining, want)
	}
	// The slot key is deleted with its last slot.
	if n, err := probe.Exists(context.Background(), slotKey(prefix+"{shared}#h", "inflight")).Result(); err != nil || n != 0 {
		t.Errorf("slot key exists (%d, %v) with no slot held", n, err)
	}
}

// TestConcurrencyLeaseOfDeadInstance: an instance takes every slot and
// dies without giving them back (its requests are abandoned and its client
// closed). Another instance is denied until the leases end, then admitted:
// no earlier than the lease after the dead instance's takes (by the
// server's clock), and within a bounded time.
func TestConcurrencyLeaseOfDeadInstance(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	budgets := []core.Budget{{Name: "exports", Algorithm: core.Concurrency, Quota: 3, Window: lease, Key: constKey("tenant-7")}}
	const prefix = "conc:lease:"
	deadClient := newClient(t, srv.Addr())
	dead := core.MustNew(core.Config{Store: mustStore(t, deadClient, Config{Prefix: prefix}), Budgets: budgets, FailureMode: core.FailClosed})
	alive := core.MustNew(core.Config{Store: mustStore(t, newClient(t, srv.Addr()), Config{Prefix: prefix}), Budgets: budgets, FailureMode: core.FailClosed})
	ld, la := dead.MustLayer(core.Use("exports")), alive.MustLayer(core.Use("exports"))
	req := func() *core.Request {
		return &core.Request{Method: "POST", Path: "/export", Context: context.Background()}
	}

	var lastTake int64
	for i := range 3 {
		var d core.Decision
		ld.Decide(req(), &d)
		if !d.Allowed || d.Err != nil {
			t.Fatalf("dead instance's take %d: %+v", i, d)
		}
		lastTake = max(lastTake, d.Results[0].Stamp)
	}
	// The slot key lives no longer than the lease.
	ttl, err := deadClient.PTTL(context.Background(), slotKey(prefix+"{tenant-7}#h", "exports")).Result()
	if err != nil || ttl <= 0 || ttl > lease {
		t.Fatalf("slot key TTL %v (%v), want (0, %v]", ttl, err, lease)
	}
	_ = deadClient.Close() // the instance dies holding its slots

	var d core.Decision
	la.Decide(req(), &d)
	if d.Allowed || d.DeniedBy != "exports" || d.RetryAfter != core.ConcurrencyRetryAfter {
		t.Fatalf("other instance while the dead one's leases run: %+v", d)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.Reset()
		la.Decide(req(), &d)
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		if d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still denied 30 s after a lease of %v", lease)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// d's slot id is the server's time of its take, or just after.
	if got := d.Results[0].Stamp - lastTake; got < lease.Microseconds() {
		t.Errorf("admitted %dµs after the dead instance's last take, before its lease of %v ended", got, lease)
	}
	if d.Results[0].Remaining != 2 {
		t.Errorf("after the leases ended: %d free slots, want 2 (every dead slot reclaimed)", d.Results[0].Remaining)
	}
	d.Done(context.Background(), 0)
	if p, err := alive.Peek(context.Background(), "tenant-7", "exports"); err != nil || p[0].Remaining != 3 {
		t.Errorf("after the release: %+v %v", p, err)
	}
}
