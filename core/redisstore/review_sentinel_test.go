package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/core"
)

// runningClock reads a chosen instant plus the real time elapsed since it
// was made.
type runningClock struct {
	base  time.Time
	start time.Time
}

func (c runningClock) Now() time.Time { return c.base.Add(time.Since(c.start)) }

// TestSentinelFailoverAcrossWindowBoundary is TestSentinelFailover at a
// moment it can hit in real time: the master dies 0.4 s before a minute
// boundary. The failover takes longer than that (down-after alone is
// 500 ms; about 1.4 s here), so the fault rig's one-minute fixed window
// rolls over and the first decision after the failover is rightly allowed:
// the lead's test then fails ("the spent budget admitted a request"),
// about once in 60/1.4 ≈ 40 runs. The rig's budget needs a window far
// longer than a failover (an hour) for the check to mean what it says.
func TestSentinelFailoverAcrossWindowBoundary(t *testing.T) {
	d := redistest.StartSentinel(t, "quotagate", 1)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            d.Name,
		SentinelAddrs:         []string{d.Sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	const deadline = 300 * time.Millisecond
	clock := runningClock{base: time.Date(2026, 11, 30, 12, 0, 59, 600_000_000, time.UTC), start: time.Now()}
	st := mustStore(t, client, Options{Prefix: "sentinel:", Timeout: deadline, Clock: clock})
	rig := newFaultRig(t, st, core.Config{BreakerCooldown: 200 * time.Millisecond})
	rig.expectLimiting(t)

	ctx := context.Background()
	if n, err := client.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	if now := clock.Now(); now.Second() != 59 {
		t.Skipf("the set-up took too long: the clock reads %v before the master dies", now)
	}
	d.Master.Kill()
	start := time.Now()
	for {
		dec, _ := rig.decide()
		if dec.Err == nil {
			if dec.Allowed {
				t.Fatalf("after a %v failover (clock %v) the spent budget admitted a request: %+v",
					time.Since(start).Round(time.Millisecond), clock.Now().Format("15:04:05.000"), dec.Results)
			}
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the store did not reach the promoted replica within 30s: %v", dec.Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
