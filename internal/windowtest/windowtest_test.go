package windowtest

import (
	"testing"
	"time"
)

// A window shorter than Margin always has less than Margin left: ClearOfEdge
// returns just after the next one started.
func TestClearOfEdgeWaitsForTheNextWindow(t *testing.T) {
	const w = time.Second
	before := time.Now()
	ClearOfEdge(t, w)
	now := time.Now()
	if into := time.Duration(now.UnixNano() % int64(w)); into > 500*time.Millisecond {
		t.Errorf("returned %v into a window of %v, want just after its start", into, w)
	}
	if now.Truncate(w).Equal(before.Truncate(w)) {
		t.Errorf("returned in the window it was called in (%v, %v)", before, now)
	}
}
