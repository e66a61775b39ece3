package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSentinelFailover runs a budget through a Sentinel-managed deployment
// (redis.NewFailoverClient): it limits exactly; while the master is down
// and the Sentinel fails over, requests pass (fail-open) within the
// deadline; afterwards the store follows the promoted replica and the
// replicated count still holds.
func TestSentinelFailover(t *testing.T) {
	d := redistest.StartSentinel(t, "quotagate", 1)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            d.Name,
		SentinelAddrs:         []string{d.Sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	const deadline = 300 * time.Millisecond
	// The store's clock starts at the top of an hour, so the rig's one-hour
	// window cannot roll over during the failover.
	clock := runningClock{base: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), start: time.Now()}
	useFakeTime(t, client, clock, 0)
	st := mustStore(t, client, Config{Prefix: "sentinel:", Timeout: deadline})
	rig := newFaultRig(t, st, core.Config{BreakerCooldown: 200 * time.Millisecond})
	rig.expectLimiting(t) // 5 admitted, the 6th denied

	ctx := context.Background()
	// The count reaches the replica before the master dies, so the
	// failover must not hand the client a fresh budget.
	if n, err := client.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	d.Master.Kill()

	start := time.Now()
	failedOpen := 0
	for {
		dec, took := rig.decide()
		if took > deadline+latencySlack {
			t.Fatalf("a decision during the failover took %v (deadline %v)", took, deadline)
		}
		if dec.Err == nil {
			if dec.Allowed {
				t.Fatalf("after the failover the spent budget admitted a request: %+v", dec.Results)
			}
			break
		}
		if !dec.Allowed {
			t.Fatalf("a decision during the failover was denied: %v", dec.Err)
		}
		failedOpen++
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the store did not reach the promoted replica within 30s: %v", dec.Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, want := d.MasterAddr(), d.Replicas[0].Addr(); got != want {
		t.Fatalf("sentinel reports master %s, want the promoted replica %s", got, want)
	}
	if failedOpen == 0 {
		t.Fatal("no decision failed open: the master's death was not observed")
	}
	if rig.obs.errs.Load() == 0 {
		t.Fatal("no store error reached the observer")
	}
	t.Logf("failover took %v; %d decisions failed open meanwhile", time.Since(start).Round(time.Millisecond), failedOpen)
}

// runningClock reads a chosen instant plus the real time elapsed since it
// was made.
type runningClock struct {
	base  time.Time
	start time.Time
}

func (c runningClock) Now() time.Time { return c.base.Add(time.Since(c.start)) }
