package redisstore

import (
	"context"
	"sync"
	"time"
)

// A runCtx is the context of one call to the server: the caller's values,
// none of its cancellation (a script that already charged must not be
// abandoned halfway because the request ended), and the store's timeout
// as its deadline. It is the context.WithoutCancel + context.WithTimeout
// pair, recycled: those cost five allocations a call, a third of a
// decision's, and a runCtx whose deadline did not pass is reused with its
// timer and channel.
//
// A runCtx is valid from callContext until release; the client must not
// keep it past the call, as go-redis does not.
type runCtx struct {
	parent   context.Context
	deadline time.Time
	bounded  bool          // deadline is set
	done     chan struct{} // closed at the deadline
	timer    *time.Timer   // closes done; nil until a bounded use
}

var runCtxPool = sync.Pool{New: func() any { return new(runCtx) }}

// newRunCtx returns a context of parent's values with the deadline at,
// or none when at is zero.
func newRunCtx(parent context.Context, at time.Time) *runCtx {
	if parent == nil {
		parent = context.Background()
	}
	c := runCtxPool.Get().(*runCtx)
	c.parent, c.deadline, c.bounded = parent, at, !at.IsZero()
	if !c.bounded {
		return c
	}
	if c.done == nil {
		c.done = make(chan struct{})
	}
	if c.timer == nil {
		done := c.done
		c.timer = time.AfterFunc(time.Until(at), func() { close(done) })
	} else {
		c.timer.Reset(time.Until(at))
	}
	return c
}

// release ends the call. A runCtx whose timer already fired (its channel
// is closed, or about to be) is left to the collector, not reused.
func (c *runCtx) release() {
	if c.bounded && !c.timer.Stop() {
		return
	}
	c.parent = nil
	runCtxPool.Put(c)
}

// Deadline returns the store's deadline for the call.
func (c *runCtx) Deadline() (time.Time, bool) { return c.deadline, c.bounded }

// Done is closed at the deadline; it is nil for a call without one.
func (c *runCtx) Done() <-chan struct{} {
	if !c.bounded {
		return nil
	}
	return c.done
}

// Err returns context.DeadlineExceeded once the deadline passed.
func (c *runCtx) Err() error {
	if !c.bounded {
		return nil
	}
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Value returns the caller's value for key.
func (c *runCtx) Value(key any) any { return c.parent.Value(key) }

// String names the context for debugging.
func (c *runCtx) String() string { return "redisstore.runCtx" }
