// Package storetest is the conformance kit every [core.Store] runs, as
// package core/limittest is for adapters: exported checks that take a
// store and report what it got wrong.
//
// A store's test calls [Run]:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Config{New: func() (core.Store, error) { return newStore() }})
//	}
//
// and code without a *testing.T (an Example) calls [Verify]. The memory
// store and the Redis store (single node and Cluster) run it, and the
// checks that move time below.
//
// Every check of [Run] runs on the store's own clock, whatever it is (a
// Redis store reads the server's): its windows are a day long, so nothing
// it counts expires or refills while it runs. Each check uses budget
// names of its own and keys it draws at random, so one store serves them
// all, and a store shared with other data is not disturbed.
//
// Time is checked on a clock the kit sets. A store's test passes an
// [OpenAt], which opens the store on a given clock (the memory store's
// Config.Clock; the Redis store's tests hand its scripts the time), to
// [Time] and [Bounds]:
//
//	func TestTime(t *testing.T) {
//		storetest.Time(t, func(clock core.Clock) (core.Store, error) { return newStoreAt(clock) })
//	}
//
// [Time] moves the clock across window boundaries, emission intervals and
// idle spells, and checks every algorithm's roll-over, refill, expiry and
// limit changes to the microsecond; [Bounds] checks every algorithm's
// worst case under adversarial arrivals. [VerifyTime] and [VerifyBounds]
// are their forms without a *testing.T.
//
// A store built on a client library that the root module does not
// already require (a SQL driver, a Memcached client) is a module of its
// own, as a router adapter is, so that only its users build with that
// library, and its tests run this kit (CONTRIBUTING.md, Modules).
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Config says what to check.
type Config struct {
	// New returns the store to check. Run and Verify call it once and
	// close nothing: the caller's cleanup owns the store.
	New func() (core.Store, error)
	// Algorithms lists the algorithms the store implements; the checks
	// skip the others. Default: all six.
	Algorithms []core.Algorithm
}

// A Check is one property every store must have.
type Check struct {
	// Name names the check, as Run's subtest.
	Name string
	// Run checks s and returns what it got wrong, or nil.
	Run func(ctx context.Context, s core.Store, algs []core.Algorithm) error
}

// Checks are the kit's checks, in the order Run runs them.
var Checks = []Check{
	{"Exact", exact},
	{"AllOrNothing", allOrNothing},
	{"Shadow", shadow},
	{"Refund", refund},
	{"LimitChange", limitChange},
	{"ConcurrencySlots", concurrencySlots},
	{"Parallel", parallel},
	{"DistinctItems", distinctItems},
	{"Peek", peek},
}

var allAlgorithms = []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.SlidingLog, core.TokenBucket, core.LeakyBucket, core.Concurrency}

// Run runs every check on a store from cfg.New, each as a subtest of t.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	s, err := cfg.New()
	if err != nil {
		t.Fatalf("storetest: new store: %v", err)
	}
	algs := cfg.algorithms()
	for _, c := range Checks {
		t.Run(c.Name, func(t *testing.T) {
			if err := c.Run(context.Background(), s, algs); err != nil {
				t.Error(err)
			}
		})
	}
}

// Verify runs every check on a store from cfg.New and returns what the
// store got wrong, every failed check's error joined, or nil.
func Verify(ctx context.Context, cfg Config) error {
	s, err := cfg.New()
	if err != nil {
		return fmt.Errorf("storetest: new store: %w", err)
	}
	algs := cfg.algorithms()
	var errs []error
	for _, c := range Checks {
		if err := c.Run(ctx, s, algs); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (c Config) algorithms() []core.Algorithm {
	if len(c.Algorithms) == 0 {
		return allAlgorithms
	}
	return c.Algorithms
}

const day = 24 * time.Hour

// limitOf returns a day-long limit of algorithm a whose capacity is n.
func limitOf(a core.Algorithm, n int64) core.Limit {
	l := core.Limit{Algorithm: a, Quota: n, Window: day}
	switch a {
	case core.TokenBucket:
		l.Burst = n
	case core.LeakyBucket:
		l.Burst, l.MaxWait = n, time.Millisecond // far less than one interval: no wait admits
	}
	return l
}

// fresh returns a key no other check or run uses.
func fresh() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "storetest-" + hex.EncodeToString(b[:])
}

// take runs one Take of items and returns its outcomes.
func take(ctx context.Context, s core.Store, items ...core.Item) ([]core.Outcome, error) {
	out := make([]core.Outcome, len(items))
	if err := s.Take(ctx, items, out); err != nil {
		return nil, fmt.Errorf("take %s: %w", describe(items), err)
	}
	return out, nil
}

func describe(items []core.Item) string {
	var parts []string
	for _, it := range items {
		parts = append(parts, fmt.Sprintf("%s/%s cost %d", it.Budget, it.Limit.Algorithm, it.Cost))
	}
	return fmt.Sprint(parts)
}

// exact: a budget of capacity 5 admits five requests of cost 1, each
// charged and reporting the units left (4 down to 0), then denies the
// sixth, charging nothing, with a retry-after.
func exact(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	for _, a := range algs {
		it := core.Item{Budget: "storetest-exact-" + a.String(), Key: fresh(), Limit: limitOf(a, 5), Cost: 1}
		for i := int64(0); i < 5; i++ {
			out, err := take(ctx, s, it)
			if err != nil {
				return err
			}
			if o := out[0]; !o.Allowed || !o.Charged || o.Remaining != 4-i {
				return fmt.Errorf("%s: request %d of 5: %+v, want allowed, charged, remaining %d", a, i+1, o, 4-i)
			}
		}
		out, err := take(ctx, s, it)
		if err != nil {
			return err
		}
		if o := out[0]; o.Allowed || o.Charged || o.Remaining != 0 || (a != core.Concurrency && o.RetryAfter <= 0) {
			return fmt.Errorf("%s: request 6 of 5: %+v, want denied, not charged, remaining 0, a retry-after", a, o)
		}
	}
	return nil
}

// allOrNothing: a take whose second item denies charges neither; the
// first item's budget still holds all its units.
func allOrNothing(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	for _, a := range algs {
		key := fresh()
		full := core.Item{Budget: "storetest-aon-a-" + a.String(), Key: key, Limit: limitOf(a, 5), Cost: 2}
		spent := core.Item{Budget: "storetest-aon-b-" + a.String(), Key: key, Limit: limitOf(a, 1), Cost: 1}
		if _, err := take(ctx, s, spent); err != nil {
			return err
		}
		out, err := take(ctx, s, full, spent)
		if err != nil {
			return err
		}
		if out[0].Charged || out[1].Charged || out[1].Allowed {
			return fmt.Errorf("%s: a take with a denying item: %+v, %+v; want nothing charged, the second denied", a, out[0], out[1])
		}
		if !out[0].Allowed || out[0].Remaining != 5 {
			return fmt.Errorf("%s: the item that would have been allowed: %+v, want allowed with remaining 5 (its state now)", a, out[0])
		}
		out, err = take(ctx, s, full)
		if err != nil {
			return err
		}
		if !out[0].Charged || out[0].Remaining != 3 {
			return fmt.Errorf("%s: after the denied take: %+v, want charged with remaining 3", a, out[0])
		}
	}
	return nil
}

// shadow: a shadow item that does not fit never makes a take deny, and
// one that fits is charged with the rest.
func shadow(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	for _, a := range algs {
		key := fresh()
		real := core.Item{Budget: "storetest-shadow-real-" + a.String(), Key: key, Limit: limitOf(a, 5), Cost: 1}
		sh := core.Item{Budget: "storetest-shadow-" + a.String(), Key: key, Limit: limitOf(a, 1), Cost: 1, Shadow: true}
		out, err := take(ctx, s, real, sh)
		if err != nil {
			return err
		}
		if !out[0].Charged || !out[1].Charged {
			return fmt.Errorf("%s: both fit: %+v, %+v; want both charged", a, out[0], out[1])
		}
		out, err = take(ctx, s, real, sh)
		if err != nil {
			return err
		}
		if !out[0].Charged || out[0].Remaining != 3 || out[1].Allowed || out[1].Charged {
			return fmt.Errorf("%s: the shadow item full: %+v, %+v; want the real item charged (remaining 3), the shadow one denied and not charged", a, out[0], out[1])
		}
	}
	return nil
}

// refund: a refund gives back exactly what a take charged.
func refund(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	for _, a := range algs {
		it := core.Item{Budget: "storetest-refund-" + a.String(), Key: fresh(), Limit: limitOf(a, 5), Cost: 3}
		out, err := take(ctx, s, it)
		if err != nil {
			return err
		}
		if err := s.Refund(ctx, []core.Item{it}, out); err != nil {
			return fmt.Errorf("%s: refund: %w", a, err)
		}
		it.Cost = 1
		out, err = take(ctx, s, it)
		if err != nil {
			return err
		}
		if !out[0].Charged || out[0].Remaining != 4 {
			return fmt.Errorf("%s: after a take of 3 and its refund: %+v, want charged with remaining 4", a, out[0])
		}
	}
	return nil
}

// limitChange: a raised quota applies at the next take without forgetting
// what was spent; a changed algorithm starts from an empty state.
func limitChange(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	for _, a := range algs {
		if a == core.TokenBucket || a == core.LeakyBucket {
			continue // a bucket keeps the spent fraction, not the count
		}
		it := core.Item{Budget: "storetest-change-" + a.String(), Key: fresh(), Limit: limitOf(a, 2), Cost: 2}
		if _, err := take(ctx, s, it); err != nil {
			return err
		}
		it.Limit, it.Cost = limitOf(a, 5), 1
		out, err := take(ctx, s, it)
		if err != nil {
			return err
		}
		if !out[0].Charged || out[0].Remaining != 2 {
			return fmt.Errorf("%s: quota raised from 2 (spent) to 5: %+v, want charged with remaining 2", a, out[0])
		}
	}
	if !slices.Contains(algs, core.FixedWindow) || !slices.Contains(algs, core.SlidingLog) {
		return nil
	}
	it := core.Item{Budget: "storetest-change-alg", Key: fresh(), Limit: limitOf(core.FixedWindow, 3), Cost: 3}
	if _, err := take(ctx, s, it); err != nil {
		return err
	}
	it.Limit, it.Cost = limitOf(core.SlidingLog, 3), 1
	out, err := take(ctx, s, it)
	if err != nil {
		return err
	}
	if !out[0].Charged || out[0].Remaining != 2 {
		return fmt.Errorf("fixed_window spent, then sliding_log: %+v, want a fresh state (charged, remaining 2)", out[0])
	}
	return nil
}

// concurrencySlots: slots are held until refunded, and a refund frees
// exactly its slot.
func concurrencySlots(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	if !slices.Contains(algs, core.Concurrency) {
		return nil
	}
	it := core.Item{Budget: "storetest-slots", Key: fresh(), Limit: limitOf(core.Concurrency, 2), Cost: 1}
	first, err := take(ctx, s, it)
	if err != nil {
		return err
	}
	if _, err := take(ctx, s, it); err != nil {
		return err
	}
	out, err := take(ctx, s, it)
	if err != nil {
		return err
	}
	if out[0].Allowed {
		return fmt.Errorf("a third slot of 2: %+v, want denied", out[0])
	}
	if err := s.Refund(ctx, []core.Item{it}, first); err != nil {
		return fmt.Errorf("refund of a slot: %w", err)
	}
	out, err = take(ctx, s, it)
	if err != nil {
		return err
	}
	if !out[0].Charged || out[0].Remaining != 0 {
		return fmt.Errorf("after a slot was given back: %+v, want charged with remaining 0", out[0])
	}
	return nil
}

// parallel: 8 goroutines taking one unit 50 times each from a budget of
// 100 are charged exactly 100 times in all.
func parallel(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	for _, a := range algs {
		it := core.Item{Budget: "storetest-parallel-" + a.String(), Key: fresh(), Limit: limitOf(a, 100), Cost: 1}
		var mu sync.Mutex
		charged := 0
		var errs []error
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					out, err := take(ctx, s, it)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else if out[0].Charged {
						charged++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			return errs[0]
		}
		if charged != 100 {
			return fmt.Errorf("%s: %d of 400 concurrent takes charged on a budget of 100", a, charged)
		}
	}
	return nil
}

// distinctItems: a take that names one (budget, key) twice is an error.
func distinctItems(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	it := core.Item{Budget: "storetest-distinct", Key: fresh(), Limit: limitOf(algs[0], 5), Cost: 1}
	out := make([]core.Outcome, 2)
	if err := s.Take(ctx, []core.Item{it, it}, out); err == nil {
		return errors.New("a take naming one budget and key twice succeeded; it must fail")
	}
	return nil
}

// peek: a store that implements core.Peeker reports what a take left and
// charges nothing.
func peek(ctx context.Context, s core.Store, algs []core.Algorithm) error {
	p, ok := s.(core.Peeker)
	if !ok {
		return nil
	}
	for _, a := range algs {
		it := core.Item{Budget: "storetest-peek-" + a.String(), Key: fresh(), Limit: limitOf(a, 5), Cost: 2}
		if _, err := take(ctx, s, it); err != nil {
			return err
		}
		for range 2 {
			out := make([]core.Outcome, 1)
			if err := p.Peek(ctx, []core.Item{it}, out); err != nil {
				return fmt.Errorf("%s: peek: %w", a, err)
			}
			if !out[0].Allowed || out[0].Charged || out[0].Remaining != 3 {
				return fmt.Errorf("%s: peek after a take of 2 of 5: %+v, want allowed, not charged, remaining 3", a, out[0])
			}
		}
	}
	return nil
}
