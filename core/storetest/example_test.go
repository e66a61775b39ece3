package storetest_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/storetest"
)

// windowStore is a toy store of fixed windows: a map under a mutex. It is
// what a store author starts from; the kit tells what it gets wrong.
type windowStore struct {
	mu    sync.Mutex
	m     map[[2]string]*window
	clock core.Clock // nil: the system's
}

type window struct {
	start, count int64 // µs since the epoch; units spent in it
	length       int64 // µs
}

// now returns the store's time in µs since the epoch.
func (s *windowStore) now() int64 {
	if s.clock == nil {
		return time.Now().UnixMicro()
	}
	return s.clock.Now().UnixMicro()
}

// state returns the window of it at now (µs), as it stands.
func (s *windowStore) state(it *core.Item, now int64) *window {
	w := it.Limit.Window.Microseconds()
	st := s.m[[2]string{it.Budget, it.Key}]
	if st == nil || st.length != w || now >= st.start+w {
		return &window{start: now - now%w, length: w}
	}
	return st
}

func (s *windowStore) Take(_ context.Context, items []core.Item, out []core.Outcome) error {
	if err := core.CheckDistinct(items); err != nil {
		return fmt.Errorf("window store: take: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ok := true
	for i := range items {
		it, st := &items[i], s.state(&items[i], now)
		reset := time.Duration(st.start+st.length-now) * time.Microsecond
		o := core.Outcome{Allowed: st.count+it.Cost <= it.Limit.Quota, Reset: reset, Stamp: now,
			Remaining: max(0, it.Limit.Quota-st.count)}
		if !o.Allowed {
			o.RetryAfter = reset
			ok = ok && it.Shadow
		}
		out[i] = o
	}
	if !ok {
		return nil // nothing charged; outcomes describe the state now
	}
	for i := range items {
		if it := &items[i]; out[i].Allowed {
			st := s.state(it, now)
			st.count += it.Cost
			s.m[[2]string{it.Budget, it.Key}] = st
			out[i].Charged, out[i].Remaining = true, it.Limit.Quota-st.count
		}
	}
	return nil
}

func (s *windowStore) Refund(_ context.Context, items []core.Item, outs []core.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range items {
		st := s.m[[2]string{items[i].Budget, items[i].Key}]
		if outs[i].Charged && st != nil && outs[i].Stamp >= st.start && outs[i].Stamp < st.start+st.length {
			st.count = max(0, st.count-items[i].Cost)
		}
	}
	return nil
}

// A toy store of fixed windows passes the kit's checks for the one
// algorithm it implements.
func Example() {
	err := storetest.Verify(context.Background(), storetest.Config{
		New:        func() (core.Store, error) { return &windowStore{m: map[[2]string]*window{}}, nil },
		Algorithms: []core.Algorithm{core.FixedWindow},
	})
	fmt.Println("problems:", err)
	// Output: problems: <nil>
}

// The toy store, given the kit's clock, rolls its windows over, forgets
// idle keys and applies changed quotas as the fixed window's definition
// says, to the microsecond.
func ExampleVerifyTime() {
	err := storetest.VerifyTime(context.Background(), func(clock core.Clock) (core.Store, error) {
		return &windowStore{m: map[[2]string]*window{}, clock: clock}, nil
	}, core.FixedWindow)
	fmt.Println("problems:", err)
	// Output: problems: <nil>
}
