package core_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// TestBreakerCallbackMayUseTheEngine: an OnBreaker callback that sends a
// request through the engine (here: on recovery, it replays queued work,
// and the store fails again) must not deadlock, and the change its
// request makes is reported after it returns.
func TestBreakerCallbackMayUseTheEngine(t *testing.T) {
	c := newFakeClock(t0)
	fs := &flakyStore{Store: newStore(t, c)}
	var l *core.Layer
	var changes []bool
	e := core.MustNew(core.Config{
		Store: fs, Clock: c, BreakerThreshold: 1, BreakerCooldown: time.Second,
		OnBreaker: func(open bool) {
			changes = append(changes, open)
			if !open && len(changes) == 2 {
				fs.down.Store(true) // the store flaps
				decide(l, request("GET", "replay"))
			}
		},
		Budgets: []core.Budget{{Name: "b", Quota: 100, Window: time.Minute, Key: remoteAddrKey}},
	})
	l = e.MustLayer(core.Use("b"))
	fs.down.Store(true)
	decide(l, request("GET", "k")) // opens the breaker
	c.Advance(time.Second)
	fs.down.Store(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		decide(l, request("GET", "k")) // the probe succeeds: closes it
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a decision made inside OnBreaker deadlocked the breaker's notification (the goroutine is stuck)")
	}
	if len(changes) != 3 || !changes[0] || changes[1] || !changes[2] {
		t.Fatalf("breaker changes %v, want [true false true]", changes)
	}
}
