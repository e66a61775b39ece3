// Package core is quotagate's rate-limiting engine: named budgets, the
// algorithms that count them, the Store interface that holds their state,
// the in-memory store, and the rendering of rate-limit headers and denials.
//
// # Vocabulary
//
// A [Budget] is a named limit: an [Algorithm], a quota per window (and a burst
// where it applies), a [KeyFunc] that says whose budget a request spends, the
// methods it ignores, how its quota is resolved per key, and a shadow flag.
//
// An [Engine] holds the budgets and a [Store]. A [Layer] is one middleware's
// view of the engine: the budgets it applies ([Use]), what a request costs
// in each ([Cost], [CostIn], [CostFrom]), which requests it skips ([Skip]),
// which answers it counts ([CountWhen]), its header style ([Headers])
// and its denial ([Deny]). The router adapters (nethttp, ginmw, echomw,
// fibermw and their subpackages for Echo v5 and Fiber v3) take these
// options and write the [Decision]: header fields on every response, and a
// denial (429 with Retry-After by default) when it is not allowed. Their
// LimitBy functions build a one-budget engine in one call.
//
// Outside a router (a queue consumer, a gRPC handler), call [Layer.Decide]
// with a [Request] of your own. Package core/adapter is the request
// sequence the router adapters share, for writing an adapter for another
// router.
//
// # Exact semantics
//
// All budgets evaluated for one request are all-or-nothing: if one denies,
// none is charged. When layers are stacked (a route group's and a route's),
// the same [Decision] travels through them and a denial in a later layer
// refunds what earlier layers charged, so the net effect is the same.
// A denied request is charged nothing. A budget that ignores the request's
// method is neither evaluated, charged, nor reported.
//
// Every algorithm has one definition, computed in integer microseconds
// (the sliding window counter in integer milliseconds), which the memory
// store and the Redis store share:
//
//   - [FixedWindow]: windows aligned to multiples of the window since the
//     Unix epoch; a request of cost n passes when count+n <= quota. Reset is
//     the end of the window.
//   - [SlidingWindow]: a counter per aligned window; the estimate is the
//     previous window's count weighted by the part of it that still overlaps
//     the sliding window, plus the current count.
//   - [SlidingLog]: one timestamped entry per admitted request; exact.
//   - [TokenBucket]: GCRA with emission interval T = ceil(window/quota) µs and
//     capacity burst×T; one timestamp (the theoretical arrival time) per key.
//   - [LeakyBucket]: the same GCRA, but a request that would be denied waits
//     for its slot when the wait is at most MaxWait (shaping).
//
// Durations in a [Result] (Reset, RetryAfter, Delay) are exact to the
// microsecond; headers round them up to whole seconds.
package core
