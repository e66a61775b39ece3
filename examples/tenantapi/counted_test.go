package tenantapi_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// TestCountedRetriesShareSlots: counts that ran past their window run
// again in a fresh window, at most len(retrySlots) at once, and their
// second attempt's findings are what the test reports.
func TestCountedRetriesShareSlots(t *testing.T) {
	// A 1 s margin for a 100 ms second attempt, so a busy machine does
	// not make it overrun too.
	const w, need = 3 * time.Second, time.Second
	var running, most atomic.Int32
	// Parallel subtests, not bare goroutines: countedIn may call t.Fatal.
	t.Run("counts", func(t *testing.T) {
		for i := range 5 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				attempts := 0
				countedIn(t, w, need, func(r reporter) {
					attempts++
					if attempts == 1 {
						// Too slow: run past the end of the window.
						time.Sleep(time.Until(e2e.WindowAt(time.Now(), w).End) + 50*time.Millisecond)
						return
					}
					n := running.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(100 * time.Millisecond)
					running.Add(-1)
				})
				if attempts != 2 {
					t.Errorf("%d attempts, want 2", attempts)
				}
			})
		}
	})
	if m := most.Load(); m < 1 || m > int32(cap(retrySlots)) {
		t.Errorf("%d retries ran at once, want 1 to %d", m, cap(retrySlots))
	}
}
