package e2e

import (
	"testing"
	"time"
)

// Window is one fixed window of the examples' budgets: [Start, End),
// aligned to multiples of its length since the Unix epoch, as the
// fixed-window algorithm aligns them (a one-minute window starts at :00).
type Window struct {
	Start, End time.Time
}

// WindowAt returns the window of length w that holds instant now.
func WindowAt(now time.Time, w time.Duration) Window {
	// time.Time.Truncate rounds relative to the zero Time, not the Unix
	// epoch; align explicitly. Windows are wall-clock intervals: drop the
	// monotonic reading, or two windows computed from different instants
	// can disagree by a nanosecond about where a boundary lies.
	now = now.Round(0)
	since := now.UnixNano() % int64(w)
	start := now.Add(-time.Duration(since))
	return Window{Start: start, End: start.Add(w)}
}

// margin is how far from a window boundary counting starts, to absorb the
// skew between the test's clock, the example's and Redis's (one machine).
const margin = 150 * time.Millisecond

// AwaitWindow waits until at least need is left of the current window of
// length w, sleeping into the next window when less is left, and returns
// the window to count in. Tests that count up to a quota call it first, so
// that every request they count lands in one window, and call
// [Window.Check] when done. It fails the test when need+margin exceeds w.
func AwaitWindow(t testing.TB, w, need time.Duration) Window {
	t.Helper()
	if need+2*margin > w {
		t.Fatalf("e2e: cannot fit %v of work in a %v window", need, w)
	}
	now := time.Now()
	win := WindowAt(now, w)
	if now.Before(win.Start.Add(margin)) {
		time.Sleep(win.Start.Add(margin).Sub(now))
		return win
	}
	if win.End.Sub(now) >= need+margin {
		return win
	}
	next := win.End
	wait := next.Add(margin).Sub(now)
	t.Logf("e2e: waiting %v for a fresh %v window (%v needed, %v left)", wait.Round(time.Millisecond), w, need, win.End.Sub(now).Round(time.Millisecond))
	time.Sleep(wait)
	return Window{Start: next, End: next.Add(w)}
}

// Left returns how much of the window is left now.
func (w Window) Left() time.Duration { return time.Until(w.End) }

// Ended reports whether the window has ended, or is within the safety
// margin of its end: counts made in it since AwaitWindow may then have been
// split across two windows. Tests that can run their counting again use it
// to retry in a fresh window (see [AwaitFresh]) instead of failing.
func (w Window) Ended() bool { return time.Until(w.End) < margin }

// AwaitFresh waits for a window of length w that starts after the current
// one ends, with at least need left, so that no count made so far is in
// it. Use it to run a count again after [Window.Ended].
func AwaitFresh(t testing.TB, w, need time.Duration) Window {
	t.Helper()
	time.Sleep(time.Until(WindowAt(time.Now(), w).End))
	return AwaitWindow(t, w, need)
}

// Check fails the test when the window has ended (less than the safety
// margin is left): counts made since AwaitWindow may have been split
// across two windows, so they prove nothing.
func (w Window) Check(t testing.TB) {
	t.Helper()
	if left := time.Until(w.End); left < margin {
		t.Fatalf("e2e: the counting ran past the end of its window (%v left); the machine is too slow for this test's time budget", left.Round(time.Millisecond))
	}
}
