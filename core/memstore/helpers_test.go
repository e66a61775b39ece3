package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// fakeClock is the tests' hand-set clock.
type fakeClock = fakeclock.Clock

func newFakeClock(t time.Time) *fakeClock { return fakeclock.New(t) }

// t0 is a minute boundary.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func remoteAddrKey(r *core.Request) (string, error) { return r.RemoteAddr, nil }

func newStore(t testing.TB, c core.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// take is a one-item Take on s.
func take(t testing.TB, s core.Store, l core.Limit, key string, cost int64) core.Outcome {
	t.Helper()
	var out [1]core.Outcome
	if err := s.Take(context.Background(), []core.Item{{Budget: "b", Key: key, Limit: l, Cost: cost}}, out[:]); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func request(method, addr string) *core.Request {
	return &core.Request{Method: method, Path: "/", RemoteAddr: addr}
}

func decide(l *core.Layer, r *core.Request) *core.Decision {
	var d core.Decision
	l.Decide(r, &d)
	return &d
}
