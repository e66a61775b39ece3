// Package windowtest helps tests that count on their decisions falling in
// one window of a budget. Both stores start fixed and sliding windows at
// multiples of the window since the Unix epoch (on this machine's clock,
// which a local redis-server shares), so such a test would see a fresh
// window when it runs across the boundary.
package windowtest

import (
	"testing"
	"time"
)

// Margin is how much of a window ClearOfEdge leaves a test: more than any
// test that counts on one window takes.
const Margin = 10 * time.Second

// ClearOfEdge waits, when less than Margin of the current window of w is
// left, until the next one starts.
func ClearOfEdge(t testing.TB, w time.Duration) {
	t.Helper()
	if left := w - time.Duration(time.Now().UnixNano()%int64(w)); left < Margin {
		t.Logf("waiting %v for the next window of %v", left, w)
		time.Sleep(left + 10*time.Millisecond)
	}
}
