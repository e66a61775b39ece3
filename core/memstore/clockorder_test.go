package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// heldClock is a hand-set clock that can hold one reader: once armed, the
// next Now returns the time of that moment, but only after release (or
// after 200ms, so that a store that reads the clock under a lock the
// others need cannot deadlock the test; timedOut then says so).
// Meanwhile every other reader gets the current time. It plays a
// goroutine that read the clock and was then descheduled before it
// charged.
type heldClock struct {
	mu       sync.Mutex
	now      time.Time
	armed    bool
	timedOut bool
	held     chan struct{} // closed when the armed read has begun
	release  chan struct{}
}

func (c *heldClock) Now() time.Time {
	c.mu.Lock()
	t, armed := c.now, c.armed
	c.armed = false
	c.mu.Unlock()
	if armed {
		close(c.held)
		select {
		case <-c.release:
		case <-time.After(200 * time.Millisecond):
			c.mu.Lock()
			c.timedOut = true
			c.mu.Unlock()
		}
	}
	return t
}

func (c *heldClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *heldClock) arm() {
	c.mu.Lock()
	c.armed, c.held, c.release = true, make(chan struct{}), make(chan struct{})
	c.mu.Unlock()
}

// TestTakeAfterLateClockRead: a take whose clock reading is older than
// charges that other takes made on the same key in the meantime must not
// evaluate the key at that older time. A window algorithm would otherwise
// take the newer window's state for an old one and write the old window
// back, losing the newer window's charges (more than the quota passes); a
// token bucket would report less remaining than it has, the same count
// as another take.
//
// The late take is a hot key's take of one item (lock-free where the
// algorithm's state fits one word), or a take of two items, which locks
// its entries: a take that holds an entry's lock while it reads the clock
// makes the others wait, and is evaluated first, at its time.
func TestTakeAfterLateClockRead(t *testing.T) {
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.TokenBucket, core.LeakyBucket, core.SlidingLog} {
		for _, items := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/items=%d", alg, items), func(t *testing.T) { lateClockRead(t, alg, items) })
		}
	}
}

func lateClockRead(t *testing.T, alg core.Algorithm, items int) {
	const quota = 10
	c := &heldClock{now: t0.Add(59 * time.Second)}
	s := newStore(t, c)
	defer s.Close()
	lim := core.Limit{Algorithm: alg, Quota: quota, Window: time.Minute}
	if alg == core.TokenBucket || alg == core.LeakyBucket {
		lim.Burst = quota
	}
	take := func(n int) core.Outcome {
		its := []core.Item{{Budget: "b", Key: "k", Limit: lim, Cost: 1}, {Budget: "other", Key: "k", Limit: lim}}[:n]
		out := make([]core.Outcome, n)
		if err := s.Take(context.Background(), its, out); err != nil {
			t.Error(err)
		}
		return out[0]
	}
	// Two takes at 12:00:59: the key has an entry, and it is hot.
	for range 2 {
		if o := take(1); !o.Allowed {
			t.Fatalf("take at 12:00:59 denied: %+v", o)
		}
	}
	// The late take reads the clock at 12:00:59 and is held there; the
	// others run at 12:01:30, in the next fixed window.
	c.arm()
	late := make(chan core.Outcome)
	go func() { late <- take(items) }()
	<-c.held
	c.set(t0.Add(90 * time.Second))
	var others int
	var remaining []int64
	for range 3 {
		if o := take(1); o.Allowed {
			others++
			remaining = append(remaining, o.Remaining)
		}
	}
	close(c.release)
	lo := <-late
	for range 2 * quota {
		o := take(1)
		if !o.Allowed {
			break
		}
		others++
		remaining = append(remaining, o.Remaining)
	}
	if others > quota {
		t.Errorf("%d takes at 12:01:30 allowed, want at most the quota, %d (remaining %v)", others, quota, remaining)
	}
	c.mu.Lock()
	first := c.timedOut // the late take held a lock the others waited for
	c.mu.Unlock()
	if first {
		return // evaluated at 12:00:59, before the others: no count to compare
	}
	// Evaluated at 12:01:30 like the others: every allowed take has its
	// own remaining count.
	if lo.Allowed {
		remaining = append(remaining, lo.Remaining)
	}
	seen := map[int64]bool{}
	for _, r := range remaining {
		if seen[r] {
			t.Errorf("two allowed takes reported remaining %d (the late one last: %v)", r, remaining)
			break
		}
		seen[r] = true
	}
}
