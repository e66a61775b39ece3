// Package benchpeers measures quotagate beside the Go rate limiters people
// use instead, each wired the way its documentation shows. It is a module of
// its own, outside the repository's workspace, so that no peer ever enters a
// quotagate module's requirements; it reaches quotagate's modules through
// replace lines to this checkout.
//
// The contenders are listed here (in memory, middleware per router, Redis);
// the benchmarks that run them are in bench_test.go, the check that each one
// is wired right in wiring_test.go, and cmd/tables turns the benchmark output
// into the tables of docs/performance.md. run.sh runs it all.
package benchpeers

import (
	"context"
	"sync"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/quotagate/quotagate/core"
	qgmem "github.com/quotagate/quotagate/core/memstore"
)

// AllowFunc asks for one unit of key's quota and reports whether it was
// granted.
type AllowFunc func(key string) bool

// InMem is an in-process limiter contender.
type InMem struct {
	// Name identifies the contender in benchmark names (no '/', no space).
	Name string
	// OneKeyOnly marks a limiter that is not keyed (uber-go/ratelimit):
	// it runs in the one-key rows only.
	OneKeyOnly bool
	// Paces marks a limiter that makes callers wait instead of denying
	// (uber-go/ratelimit): the wiring check does not expect a denial.
	Paces bool
	// New builds a limiter that grants quota per window per key, sized
	// for keys distinct keys. worker returns the AllowFunc one goroutine
	// uses; close releases the limiter's goroutines (may be nil).
	New func(quota int64, window time.Duration, keys int) (worker func() AllowFunc, close func())
}

func perSecond(quota int64, window time.Duration) float64 {
	return float64(quota) / window.Seconds()
}

// InMemContenders lists the in-memory contenders, quotagate first.
func InMemContenders() []InMem {
	return []InMem{
		{
			// quotagate's memory store, one fixed-window item per Take, as
			// core/bench_test.go's BenchmarkMemoryStore drives it.
			Name: "quotagate",
			New: func(quota int64, window time.Duration, keys int) (func() AllowFunc, func()) {
				s := qgmem.MustNew(qgmem.Config{})
				l := core.Limit{Algorithm: core.FixedWindow, Quota: quota, Window: window}
				return func() AllowFunc {
					items := []core.Item{{Budget: "b", Limit: l, Cost: 1}}
					out := make([]core.Outcome, 1)
					ctx := context.Background()
					return func(key string) bool {
						items[0].Key = key
						return s.Take(ctx, items, out) == nil && out[0].Allowed
					}
				}, func() { _ = s.Close() }
			},
		},
		{
			// sethvargo/go-limiter: token bucket per key, memorystore.
			Name: "sethvargo",
			New: func(quota int64, window time.Duration, keys int) (func() AllowFunc, func()) {
				st, err := memorystore.New(&memorystore.Config{Tokens: uint64(quota), Interval: window, InitialAlloc: keys})
				if err != nil {
					panic(err)
				}
				ctx := context.Background()
				f := AllowFunc(func(key string) bool {
					_, _, _, ok, err := st.Take(ctx, key)
					return ok && err == nil
				})
				return func() AllowFunc { return f }, func() { _ = st.Close(ctx) }
			},
		},
		{
			// golang.org/x/time/rate: the package is not keyed; the usual
			// wiring is a *rate.Limiter per key in a sync.Map.
			Name: "xrate",
			New: func(quota int64, window time.Duration, keys int) (func() AllowFunc, func()) {
				var m sync.Map
				r, burst := rate.Limit(perSecond(quota, window)), int(quota)
				f := AllowFunc(func(key string) bool {
					v, ok := m.Load(key)
					if !ok {
						v, _ = m.LoadOrStore(key, rate.NewLimiter(r, burst))
					}
					return v.(*rate.Limiter).Allow()
				})
				return func() AllowFunc { return f }, nil
			},
		},
		{
			// go.uber.org/ratelimit: one unkeyed pacer whose Take waits for
			// its slot. The rate is raised so that Take never waits: what is
			// measured is its bookkeeping.
			Name:       "uber",
			OneKeyOnly: true,
			Paces:      true,
			New: func(quota int64, window time.Duration, keys int) (func() AllowFunc, func()) {
				perSec := max(int(perSecond(quota, window)), 1_000_000_000)
				rl := ratelimit.New(perSec)
				f := AllowFunc(func(string) bool { rl.Take(); return true })
				return func() AllowFunc { return f }, nil
			},
		},
		{
			// throttled/throttled: GCRA over its LRU memstore.
			Name: "throttled",
			New: func(quota int64, window time.Duration, keys int) (func() AllowFunc, func()) {
				st, err := memstore.NewCtx(max(2*keys, 65536))
				if err != nil {
					panic(err)
				}
				rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(quota, window))
				if err != nil {
					panic(err)
				}
				ctx := context.Background()
				f := AllowFunc(func(key string) bool {
					limited, _, err := rl.RateLimitCtx(ctx, key, 1)
					return err == nil && !limited
				})
				return func() AllowFunc { return f }, nil
			},
		},
		{
			// ulule/limiter: fixed window, memory store.
			Name: "ulule",
			New: func(quota int64, window time.Duration, keys int) (func() AllowFunc, func()) {
				lim := limiter.New(ululemem.NewStore(), limiter.Rate{Period: window, Limit: quota})
				ctx := context.Background()
				f := AllowFunc(func(key string) bool {
					c, err := lim.Get(ctx, key)
					return err == nil && !c.Reached
				})
				return func() AllowFunc { return f }, nil
			},
		},
	}
}

// throttledQuota is quota per window with a burst of quota (throttled's
// MaxBurst counts the requests beyond the first).
func throttledQuota(quota int64, window time.Duration) throttled.RateQuota {
	return throttled.RateQuota{MaxRate: throttled.PerDuration(int(quota), window), MaxBurst: int(quota) - 1}
}
