package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrMisconfigured marks a store error that no retry can fix because the
// store is set up wrongly, for example a single-node Redis client pointed
// at a Redis Cluster node. Stores wrap it (errors.Is finds it in the error
// a Take or Refund returns). The engine applies the budgets' failure mode
// as for any store error; observers report it as a configuration error,
// apart from outages (kind [KindStoreMisconfigured]).
var ErrMisconfigured = errors.New("store misconfigured")

// StoreError is a failed store call as the engine reports it to its
// Observer (with a store [ErrorKind]) and records it in [Decision].Err.
// Its message is the store's own, which names the store and the
// operation, behind the one "quotagate: " prefix:
//
//	quotagate: redis store: take: context deadline exceeded
//	quotagate: fallback memory store: take: ...
type StoreError struct {
	// Op is "take", "refund", "peek", "fallback take" or "fallback refund"
	// (a concurrency slot given back is a refund).
	Op string
	// Err is the store's error.
	Err error
}

func (e *StoreError) Error() string {
	if strings.HasPrefix(e.Op, "fallback ") {
		return "quotagate: fallback " + e.Err.Error()
	}
	return "quotagate: " + e.Err.Error()
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Store holds budget state and runs the algorithms atomically. The memory
// store (package core/memstore) and the Redis store (package core/redisstore)
// implement it with the same definitions.
//
// One Take evaluates and commits every budget of a decision, so a remote
// store can do it in one round trip.
type Store interface {
	// Take evaluates every item at one instant of the store's clock and
	// writes items[i]'s outcome to out[i] (len(out) >= len(items)). The
	// items name distinct (budget, key) pairs; a take that repeats one is
	// an error (the engine never builds one).
	//
	// When every item that is not Shadow allows its cost, Take charges
	// every allowed item (shadow items included); otherwise it charges
	// nothing. Outcomes describe the state after the charge when the whole
	// take was allowed. When it was denied, a denying item's outcome is its
	// evaluation with its cost, and an item that would have been allowed is
	// described by a cost-0 evaluation of the current state (Remaining and
	// Reset as they are now, Allowed true, RetryAfter and Delay 0).
	//
	// An error means nothing is known about the outcomes. Nothing was
	// charged, except that a remote store's call that timed out may still
	// have run (see the store's documentation). A store's error names the
	// store and the operation ("redis store: take: ...") and does not start
	// with "quotagate: ": the engine adds that when it wraps the error in a
	// [StoreError].
	Take(ctx context.Context, items []Item, out []Outcome) error

	// Refund gives back the charges of an earlier Take: for each i with
	// outcomes[i].Charged, the cost of items[i]. A refund after the charged
	// window has passed does nothing; a token or leaky bucket gives back only
	// the part of the charge that has not drained by the time of the refund.
	Refund(ctx context.Context, items []Item, outcomes []Outcome) error
}

// MaxShards is the most shards a [ShardedStore] tells apart: the engine
// keeps that many circuit breakers for it, besides the store's own.
const MaxShards = 64

// ShardedStore is a [Store] whose keys live on servers that fail apart,
// such as a Redis Cluster's masters: the engine keeps a circuit breaker
// per shard, so that a shard that fails opens the breaker of its own keys
// and the others' keys are still decided by the store (see
// Config.BreakerThreshold). The Redis store implements it.
type ShardedStore interface {
	Store
	// Shard returns the shard a Take of items goes to, in [0, MaxShards),
	// or -1 when the items span shards or the store cannot tell; such
	// calls share a breaker of their own. It is called before every
	// Take, so it must be quick, and safe for concurrent use.
	Shard(items []Item) int
}

// Peeker is a [Store] that can read state without changing it:
// [Engine.Peek], and so the inspection page, need it. The memory store and
// the Redis store implement it.
type Peeker interface {
	// Peek writes to out[i] (len(out) >= len(items)) what a cost-0 Take
	// of items[i] would report, at one instant of the store's clock, and
	// changes nothing: no entry or key is created, no expiry moved. Items'
	// costs are ignored. An error means nothing is known.
	Peek(ctx context.Context, items []Item, out []Outcome) error
}

// StoreStats is a store that reports its size, for the metrics packages'
// WatchMemoryStore: the memory store (package core/memstore) implements it.
type StoreStats interface {
	// Len returns how many keys the store holds.
	Len() int
	// Evictions returns how many live entries the store has evicted
	// because it was full.
	Evictions() uint64
}

// Item is one budget's part of a Take: the budget, the key it is counted
// under, its resolved limit and the cost of the request.
type Item struct {
	// Budget is the budget's name.
	Budget string
	// Key is the partition key from the budget's KeyFunc.
	Key string
	// Limit is the budget's algorithm and parameters for this key.
	Limit Limit
	// Cost is how many units the request spends; 0 <= Cost <= Limit.Capacity().
	Cost int64
	// Shadow items are evaluated and charged when allowed, but never make
	// the Take deny.
	Shadow bool
}

// Outcome is the store's answer for one Item.
type Outcome struct {
	// Allowed reports whether the item's cost fits (possibly after Delay).
	Allowed bool
	// Charged reports whether the cost was taken.
	Charged bool
	// Remaining is how many units are left (never negative).
	Remaining int64
	// Reset is the time until the budget is full again if nothing more is
	// spent.
	Reset time.Duration
	// RetryAfter is, when not Allowed, the time until the same request
	// would be allowed; 0 when Allowed.
	RetryAfter time.Duration
	// Delay is how long an allowed LeakyBucket request waits for its slot.
	Delay time.Duration
	// Stamp is the store's time of the evaluation in Unix microseconds, used
	// by Refund to find the window that was charged.
	Stamp int64
}

// CheckDistinct returns an error when two items name the same budget and
// key, which [Store.Take] does not accept. Stores call it on the items of
// a take.
func CheckDistinct(items []Item) error {
	for i := range items {
		for j := i + 1; j < len(items); j++ {
			if items[i].Budget == items[j].Budget && items[i].Key == items[j].Key {
				return fmt.Errorf("budget %q is listed twice for one key", items[i].Budget)
			}
		}
	}
	return nil
}

// EvictionObserver is an optional interface of an [Observer]: a store
// configured with an observer that implements it (the memory store,
// core/memstore) calls ObserveEviction once per live entry it evicts
// because it was full, with the evicted entry's budget. Expired entries
// and entries holding nothing spent are dropped without a call: they cost
// their key nothing. It is called on the request's goroutine, with no
// store lock held; keep it quick, and expect floods of calls while the
// store is full. [LeaseObserver] is the other store event an observer may
// hear of.
type EvictionObserver interface {
	ObserveEviction(budget string)
}
