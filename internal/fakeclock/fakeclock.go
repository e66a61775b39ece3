// Package fakeclock is a clock that a test sets by hand, for the clock
// math of budgets, observers and stores. It is safe for concurrent use.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a core.Clock that reads what it was last set or advanced to.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
