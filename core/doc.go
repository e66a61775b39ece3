// Package core is quotagate's rate-limiting engine: named budgets, the
// algorithms that count them, the Store interface that holds their state
// (the in-memory store is package core/memstore, the Redis store
// core/redisstore), the rendering of rate-limit headers and denials, and
// the request sequence router adapters run (Layer.Serve).
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
// which answers it counts ([CountWhen]), its header style ([Headers]),
// its denial ([Deny]) and a [Guard] that sheds load before any budget
// is evaluated ([GuardBy]; package core/adaptive is a concurrency limit
// that adapts to latency). The router adapters (package nethttp, and a
// module per other router, such as ginmw) take these options and write
// the [Decision]: header fields on every response, and a denial (429
// with Retry-After by default) when it is not allowed. Their LimitBy
// functions build a one-budget engine in one call.
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
//   - [Concurrency]: requests in flight rather than arrivals; a request of
//     cost n passes when held+n <= quota, and holds its n slots until it
//     finishes (see Concurrency below).
//
// Durations in a [Result] (Reset, RetryAfter, Delay) are exact to the
// microsecond; headers round them up to whole seconds.
//
// The most each algorithm admits for one key in any span of time, from
// any state, is storetest.WorstCase, to which storetest.Bounds holds every
// store under adversarial arrivals. Instances that share a store share
// those bounds. While the store fails, a budget admits what its
// [FailureMode] lets through: every request (FailOpen), none
// (FailClosed), or its quota per instance on the fallback store
// (FailLocal).
//
// # Concurrency
//
// A [Concurrency] budget limits how many requests of a key are in flight at
// once: "at most 4 concurrent exports per tenant", or, with a key function
// that returns a constant, "at most 200 requests in flight". Its Quota is
// the number of slots; its Window is a lease (below), not a period.
//
// A slot is taken when the request is decided, all-or-nothing with the
// other budgets of the request as any charge is, and given back when the
// request leaves the layer: the router adapters give it back when the
// handler returns, whether it answered, panicked, streamed a long body or
// lost its client (a handler that keeps running after its client went away
// holds its slot until it returns; on Fiber, a body stream writer runs
// after the handler returned, without the slot: see package fibermw).
// Behind a router's timeout middleware, which answers and returns while
// the handler runs on, the layer must sit behind the timeout to hold the
// slot until the handler returns (docs/semantics.md, Concurrency budgets,
// shows the placement on each router). A request denied by a later layer,
// or by a shaping wait cut short, or whose charges a CountWhen predicate
// gives back, is refunded its slot at that moment; each slot is given back
// exactly once. A direct caller of [Layer.Decide] gives the slots back with
// [Decision.Done]. Shadow budgets and dry runs take and give back slots
// as enforced budgets do, without denying; a budget that failed open holds
// nothing; a budget evaluated on the fallback store (FailLocal) holds its
// slot there and gives it back there.
//
// The memory store counts the slots held per key; an entry holding slots
// is never evicted. The Redis store keeps each slot as a lease that ends
// Window after it was taken: a take drops the slots whose lease has ended,
// so the slots of an instance that died (or lost its connection before it
// could give them back) come back within Window. Slots are not renewed: a
// request still running when its lease ends no longer holds a slot, and
// one more request may then be admitted. This is by design, to keep a
// release a single store call and to need no background work per request;
// set the lease longer than the longest request the budget guards (it
// bounds only how long a dead instance's slots stay taken).
//
// No store knows when a slot will free. A denial's RetryAfter is
// [ConcurrencyRetryAfter] (one second, the smallest Retry-After), and the
// header fields report the budget as the IETF draft's concurrency limit,
// its free slots with no window and no t (see [HeadersIETF]). A denial is
// a 429, as for every exhausted budget: the client's own requests fill
// the budget, and it can retry.
package core
