package adaptive_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
)

// TestInFlightCountsAdmittedOnly: Stats().InFlight, and the count a
// request's GuardState reports, are the admitted requests in flight:
// never more than the limit while it holds, and a refusal happens only
// when the limit's worth of requests are admitted (a refused request is
// never counted, not even for a moment, so it cannot make another one be
// refused).
func TestInFlightCountsAdmittedOnly(t *testing.T) {
	const limit = 4
	lim, err := adaptive.New(adaptive.Config{Name: "inflight", Initial: limit, Min: limit, Max: limit})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg                       sync.WaitGroup
		admitted                 atomic.Int64 // admitted and not yet released, as the test counts
		overStats, refusedBelow  atomic.Int64
		overState, admits, sheds atomic.Int64
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &core.Request{Method: "GET", Path: "/"}
			for range 2000 {
				var s core.GuardState
				ok, _ := lim.Admit(r, &s)
				if !ok {
					sheds.Add(1)
					if s.InFlight < s.Limit {
						refusedBelow.Add(1)
					}
					continue
				}
				admits.Add(1)
				admitted.Add(1)
				if s.InFlight > limit || s.InFlight < 1 {
					overState.Add(1)
				}
				if n := lim.Stats().InFlight; n > limit {
					overStats.Add(1)
				}
				runtime.Gosched()
				admitted.Add(-1)
				lim.Release(false, 0, 0)
			}
		}()
	}
	wg.Wait()
	if overStats.Load() != 0 || overState.Load() != 0 {
		t.Errorf("an admitted request saw Stats().InFlight above the limit %d times, and its own GuardState.InFlight outside [1, %d] %d times",
			overStats.Load(), limit, overState.Load())
	}
	if refusedBelow.Load() != 0 {
		t.Errorf("%d refusals reported fewer than the limit in flight", refusedBelow.Load())
	}
	if admits.Load() == 0 || sheds.Load() == 0 {
		t.Errorf("admitted %d, shed %d: the test wants both", admits.Load(), sheds.Load())
	}
	if n := lim.Stats().InFlight; n != 0 {
		t.Errorf("after every release: %d in flight", n)
	}
}
