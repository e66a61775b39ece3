package core

import "time"

// Clock tells the time. Inject one into [Config] and memstore.Config to test
// with a fake clock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the default clock. It reads the wall clock once and then
// advances with the monotonic clock, which costs one clock read per call
// instead of two and never jumps when the wall clock is stepped.
type SystemClock struct {
	base      time.Time
	baseMicro int64
}

// NewSystemClock returns a SystemClock anchored at the current wall time.
func NewSystemClock() *SystemClock {
	t := time.Now()
	return &SystemClock{base: t, baseMicro: t.UnixMicro()}
}

// Now returns the current time.
func (c *SystemClock) Now() time.Time {
	return c.base.Add(time.Since(c.base))
}

// UnixMicro returns the current time in Unix microseconds, without the
// time.Time round trip of Now: one clock read.
func (c *SystemClock) UnixMicro() int64 {
	return c.baseMicro + int64(time.Since(c.base)/time.Microsecond)
}

// nowMicros returns c's time in Unix microseconds, avoiding the
// time.Time round trip for the system clock.
func nowMicros(c Clock) int64 {
	if sc, ok := c.(*SystemClock); ok {
		return sc.UnixMicro()
	}
	return c.Now().UnixMicro()
}

var processStart = time.Now()

// monotonic returns the monotonic time since process start: one clock read.
func monotonic() time.Duration { return time.Since(processStart) }
