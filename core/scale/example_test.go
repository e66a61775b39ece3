package scale_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/scale"
	"github.com/quotagate/quotagate/keyfunc"
)

// A per-client token bucket scaled by the depth of the server's work
// queue: while more work waits than the target of 20, every client's
// quota falls, by at most a step a second, to the level that keeps the
// queue at 20, and the RateLimit fields announce it.
// Here the queue is a number set by hand and time is a clock that the
// example moves; in a server, Signal reads len(queue) and the clock is
// the system's.
func Example() {
	var depth float64 // the queue's depth, as the workers see it
	clk := &manualClock{t: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	queue := scale.MustNew(scale.Config{
		Name:     "queue",
		Signal:   func() float64 { return depth },
		Target:   20,          // jobs waiting
		Min:      0.25,        // never below a quarter of the quota
		Step:     0.1,         // at most 10% of the quota
		Interval: time.Second, // per second (default 500ms)
		Clock:    clk,         // omit in a server
	})
	store := memstore.MustNew(memstore.Config{Clock: clk})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Clock: clk, Budgets: []core.Budget{{
		Name: "per_client", Algorithm: core.TokenBucket, Quota: 600, Window: time.Minute,
		Key: keyfunc.PeerIP(), Scale: queue,
	}}})

	for second := range 16 {
		// 60 jobs would wait at full quota: the traffic admitted at
		// the scale in effect keeps the queue at 60 × scale.
		depth = 60 * queue.Scale()
		if second >= 8 {
			depth = 0 // the load ends
		}
		clk.advance(time.Second)
		queue.Scale() // a request comes, and makes the update
		res, _ := eng.Peek(context.Background(), "203.0.113.7")
		fmt.Printf("%2ds: queue %2.0f, scale %.2f, quota %d\n", second, depth, queue.Stats().Scale, res[0].Limit.Quota)
	}
	// Output:
	//  0s: queue 60, scale 0.90, quota 540
	//  1s: queue 54, scale 0.80, quota 480
	//  2s: queue 48, scale 0.70, quota 420
	//  3s: queue 42, scale 0.60, quota 360
	//  4s: queue 36, scale 0.50, quota 300
	//  5s: queue 30, scale 0.40, quota 240
	//  6s: queue 24, scale 0.33, quota 199
	//  7s: queue 20, scale 0.33, quota 199
	//  8s: queue  0, scale 0.43, quota 259
	//  9s: queue  0, scale 0.53, quota 319
	// 10s: queue  0, scale 0.63, quota 379
	// 11s: queue  0, scale 0.73, quota 439
	// 12s: queue  0, scale 0.83, quota 499
	// 13s: queue  0, scale 0.93, quota 559
	// 14s: queue  0, scale 1.00, quota 600
	// 15s: queue  0, scale 1.00, quota 600
}

// manualClock is a core.Clock that the example moves.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A schedule halves a budget's quota during office hours in Paris and
// quarters it on Friday nights; the scale is the lowest of the periods in
// force, and 1 outside them.
func ExampleParsePeriod() {
	office, err := scale.ParsePeriod("Mon-Fri 09:00-18:00")
	if err != nil {
		fmt.Println(err)
		return
	}
	office.Scale = 0.5
	night, _ := scale.ParsePeriod("Fri 22:00-06:00") // into Saturday
	night.Scale = 0.25
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, at := range []string{"2026-12-04 08:30", "2026-12-04 12:00", "2026-12-04 23:00", "2026-12-05 05:59", "2026-12-05 12:00"} {
		t, _ := time.ParseInLocation("2006-01-02 15:04", at, paris)
		clk := &manualClock{t: t}
		c := scale.MustNew(scale.Config{Schedule: []scale.Period{office, night}, Location: paris, Clock: clk})
		fmt.Printf("%s %s: %.2f\n", t.Weekday().String()[:3], at[11:], c.Scale())
	}
	fmt.Println(office, "/", night)
	// Output:
	// Fri 08:30: 1.00
	// Fri 12:00: 0.50
	// Fri 23:00: 0.25
	// Sat 05:59: 0.25
	// Sat 12:00: 1.00
	// Mon-Fri 09:00-18:00 / Fri 22:00-06:00
}
