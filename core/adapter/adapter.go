// Package adapter helps write a quotagate middleware for a router: the
// one-call LimitBy layer, the Middleware/Must bodies every adapter's
// functions share, and [Shared], the state a request's stacked layers
// share. The request sequence itself is [core.Layer.Serve], which runs a
// layer for one request through the router's [core.Exchange]. Every
// built-in adapter (nethttp, and a module per other router) is built on
// them.
//
// Users of a router that quotagate supports never need this package.
//
// # Writing an adapter
//
// This package's example_router_test.go is a whole router adapter, about
// 150 lines with its comments, for a toy router that pools its request
// context as Gin does, made of exported pieces only; it passes
// core/limittest, timeout chain included. A built-in adapter, with the
// one-line functions around this package's, its router's own options and
// their documentation, is about 250 lines (ginmw's middleware.go). It
// does what every adapter must:
//
//   - It keeps one [core.RequestState] per request, pooled, shared by the
//     request's stacked layers and found through the router's context.
//     The outermost layer fills its Request; every layer calls Serve with
//     a [core.Exchange] that reads and writes the router's response.
//   - A timeout middleware (net/http's TimeoutHandler, Fiber's timeout)
//     may run the rest of the chain, inner layers included, on a
//     goroutine of its own, and return to the outer layers before it
//     ends. So the state outlives the outermost layer: every layer holds
//     a reference while it runs ([Shared.Enter], [Shared.Leave]), and the
//     last one out, not the first, reuses the state.
//   - A router that recycles its request context once the outermost
//     middleware returns (Gin, Echo, Fiber) must not be reached by a layer
//     after that: a layer other than the outermost brackets each use of
//     the router's context with [Shared.Use] and [Shared.Release], and
//     runs the rest of the chain outside the bracket.
//   - Next(true) reports the status of the answer, for [core.CountWhen]
//     and guards.
//
// Router-specific options (a skip predicate, a denial handler in the
// router's own types) ride on the layer with [core.Attach] and are read
// back with [core.Layer.Value].
package adapter

import (
	"errors"
	"fmt"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// LimitBy returns a layer of one budget: quota requests per window for
// each key, counted with a sliding window, with the IETF header fields.
// The budget is named "default", or as a [BudgetName] option among opts
// says. It counts in a new in-memory store (whose sweeper runs for the
// life of the process), or, with a [Store] option, in that store, shared
// by every instance that uses it (a Redis store). A shared store that
// fails falls back to counting in this process's memory while it fails
// ([core.FailLocal]: each of N instances then admits up to the quota, N ×
// quota in all), and the failure is logged. It is what the adapters'
// one-call LimitBy functions build; opts are layer options.
func LimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) (*core.Layer, error) {
	if key == nil {
		return nil, errors.New("quotagate: LimitBy: no key function (use keyfunc.PeerIP() to limit by client IP)")
	}
	name, ok := core.OptionValue(opts, budgetNameKey{}).(string)
	if !ok {
		name = DefaultBudgetName
	}
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		return nil, err
	}
	cfg := core.Config{
		Store: local,
		Budgets: []core.Budget{{
			Name: name, Algorithm: core.SlidingWindow,
			Quota: quota, Window: window, Key: key,
		}},
	}
	if o, ok := core.OptionValue(opts, storeKey{}).(storeOption); ok {
		if o.st == nil {
			_ = local.Close()
			return nil, errors.New("quotagate: LimitBy: Store(nil)")
		}
		cfg.Store, cfg.Fallback, cfg.FailureMode = o.st, local, core.FailLocal
	}
	eng, err := core.New(cfg)
	if err != nil {
		_ = local.Close()
		return nil, err
	}
	l, err := eng.Layer(append([]core.LayerOption{core.Use(name)}, opts...)...)
	if err != nil {
		_ = local.Close()
		return nil, err
	}
	return l, nil
}

type storeKey struct{}

// storeOption carries a Store option's store, nil included.
type storeOption struct{ st core.Store }

// Store makes a one-call LimitBy layer count in st, a store shared by
// every instance (a Redis store: redisstore.Open), instead of in this
// process's memory; the adapters' Store options are this one. While st
// fails, the layer counts in memory (see [LimitBy]). The caller closes
// st. A layer of an engine's own budgets refuses it: an engine's store is
// core.Config.Store.
func Store(st core.Store) core.LayerOption { return core.Attach(storeKey{}, storeOption{st}) }

// DefaultBudgetName is the name of a [LimitBy] budget without a
// [BudgetName] option.
const DefaultBudgetName = "default"

type budgetNameKey struct{}

// BudgetName names the budget of a one-call LimitBy layer, as the
// RateLimit-Policy field, problem bodies, logs and metrics show it; the
// default is "default". The adapters' BudgetName options are this one.
// A layer of an engine's own budgets refuses it: those are named in
// core.Budget.Name.
func BudgetName(name string) core.LayerOption { return core.Attach(budgetNameKey{}, name) }

// MustLimitBy is LimitBy that panics on error, for the adapters' one-call
// functions, which are called at start-up.
func MustLimitBy(quota int64, window time.Duration, key core.KeyFunc, opts ...core.LayerOption) *core.Layer {
	l, err := LimitBy(quota, window, key, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// ShedBy returns a layer that only guards: g admits or sheds every request
// before the handler (a shed request is answered 503 with Retry-After; see
// [core.Guard]), and no budget is counted. It is what the adapters'
// one-call ShedBy functions build, for a load shedder alone; a
// core/adaptive Limiter is such a guard. opts are layer options.
func ShedBy(g core.Guard, opts ...core.LayerOption) (*core.Layer, error) {
	if g == nil {
		return nil, errors.New("quotagate: ShedBy: no guard (a core/adaptive Limiter is one)")
	}
	eng, err := core.New(core.Config{})
	if err != nil {
		return nil, err
	}
	return eng.Layer(append([]core.LayerOption{core.GuardBy(g)}, opts...)...)
}

// MustShedBy is ShedBy that panics on error, for the adapters' one-call
// functions, which are called at start-up.
func MustShedBy(g core.Guard, opts ...core.LayerOption) *core.Layer {
	l, err := ShedBy(g, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// Middleware creates a layer of eng configured by opts and returns the
// router's middleware for it, made by forLayer: the body of every
// adapter's Middleware function. The error lists every configuration
// problem.
func Middleware[M any](eng *core.Engine, forLayer func(*core.Layer) M, opts ...core.LayerOption) (M, error) {
	var zero M
	l, err := eng.Layer(opts...)
	if err != nil {
		return zero, err
	}
	if name, ok := l.Value(budgetNameKey{}).(string); ok {
		return zero, fmt.Errorf("quotagate: BudgetName(%q) names a LimitBy budget; an engine's budgets are named in core.Budget.Name", name)
	}
	if l.Value(storeKey{}) != nil {
		return zero, errors.New("quotagate: Store(...) gives a LimitBy layer its store; an engine's store is core.Config.Store")
	}
	return forLayer(l), nil
}

// Must returns m, and panics when err is not nil: the body of every
// adapter's MustMiddleware function, called at start-up.
func Must[M any](m M, err error) M {
	if err != nil {
		panic(err)
	}
	return m
}
