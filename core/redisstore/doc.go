// Package redisstore is a [core.Store] in Redis, so that every instance of
// a service behind a load balancer spends one budget.
//
// It works with a single server, Sentinel (redis.NewFailoverClient) and
// Redis Cluster, through go-redis's [redis.UniversalClient]:
//
//	client := redis.NewClient(&redis.Options{
//		Addr:                  "127.0.0.1:6379",
//		ContextTimeoutEnabled: true, // let the store's deadline bound each call
//	})
//	store, err := redisstore.New(client, redisstore.Config{Prefix: "myapp:rl:"})
//	...
//	engine, err := core.New(core.Config{Store: store, Budgets: budgets})
//
// # Semantics
//
// The store runs the algorithms of package core, with the same
// definitions: its Lua scripts (algorithms.lua, take.lua, refund.lua,
// lease.lua and peek.lua, embedded in the package) mirror the memory
// store's Go definitions operation for operation, in integer microseconds
// (the sliding window counter in integer milliseconds), and a
// differential test drives both with the same operations and clock and
// compares every outcome. Each algorithm's arithmetic is written once in
// Lua (eval, in algorithms.lua), and every take, lease and peek evaluates
// with it.
//
// The scripts compute in doubles, which hold integers exactly below 2^53.
// core keeps products below that bound; the store also refuses, with an
// error (so the budget's failure mode applies), limits whose window, burst
// × emission interval or shaping wait exceed 2^50 µs (about 35 years),
// beyond which GCRA's timestamps could pass it.
//
// All budgets of one decision are evaluated and committed by one script
// run: on a single server a decision is at most one round trip, whatever
// the number of budgets, and it is all-or-nothing: when a budget denies,
// nothing is charged.
//
// The scripts are a Redis function library (Redis 7.0 or later), loaded
// once per server by FUNCTION LOAD and called by FCALL, so that a call
// does not define the algorithms again. Its name carries a hash of its
// code (quotagate_<16 hex digits>), so stores of different versions on
// one server each call their own, and a library is never replaced: each
// version's library stays on the server (persisted and replicated like
// any function) until an operator removes it with FUNCTION DELETE
// quotagate_<hex> once no instance of that version runs. A
// server that lacks the library (restarted without persistence, FUNCTION
// FLUSH) gets it loaded again and the call repeated. A server that refuses
// FCALL or FUNCTION LOAD as an unknown command (Redis 6, or the commands
// renamed) makes the store run the same Lua as scripts from then on:
// EVALSHA, and EVAL after a restart, failover or SCRIPT FLUSH.
//
// # Batching
//
// On a single server (a *redis.Client, Sentinel's failover client
// included) a Store also gathers concurrent decisions; on a cluster it
// gathers those of each master (the Takes whose items all lie in one hash
// slot: every Take of one key, and of one partition), each master with
// its own queue and its own runs in flight, so a slow or dead master holds
// up only the Takes of its own slots. A script may touch the keys of one
// slot only, so a cluster's run is one script run per hash slot of its
// Takes, pipelined to the master in one round trip; a slot's run that the
// master redirects (the slot moved) runs again on its own and follows the
// cluster. Every run of a master's queue goes to that master's own
// client, found from the cluster client's slot map when the Take came, so
// go-redis hooks that should see those runs belong on the nodes (added in
// ClusterClient.OnNewNode); a hook on the ClusterClient itself sees only
// the runs that go again through it, and the Takes that are not batched.
// On a [redis.Ring] it gathers those of each shard (the Takes
// whose items the Ring puts on one shard), each shard with its own queue
// and runs in flight. A Take that finds a free run slot
// goes out at once, on its caller's goroutine, with no timer, delay or
// hand-off. Takes that arrive while every run slot has a run in flight
// queue, and when a run returns, the queue goes out as one script run (at
// most [Config.MaxBatch] decisions, default 64, and 512 keys; the rest
// follows in the next runs). The number of run slots adapts: it starts at
// one and moves, by doubling and halving probes while Takes queue, to the
// number whose decisions are answered quickest (at most 32 and half the
// client's PoolSize). It is one number for the whole store, measured over
// the decisions of every master or shard, each of which may keep that
// many runs in flight: their runs share the client's cores. On loopback
// under heavy concurrency that is a few runs of large batches; across a
// network, or with few callers, it is about one run per caller, each sent
// alone. That run evaluates the
// decisions one after the other, in queue order, at one instant of the
// server's clock: each decision is all-or-nothing on its own, exactly as
// if it had been sent alone, and sees the charges of the decisions before
// it; a denial in one never charges or denies another. The per-call cost
// of Redis (command parsing, script set-up, I/O) is then shared by the
// whole batch, which is what lets a busy store approach, or with one
// budget pass, the throughput of a trivial script call per decision. The
// queue is sent by whichever goroutine finishes a run, and by a goroutine
// that lives only while Takes are queued: batching needs no Close. Set
// MaxBatch to 1 to send every Take on its own. A Take whose items span
// hash slots (on a Ring, shards) is not batched: its items are grouped
// by slot (hash tag) and the groups run in one pipelined round trip.
//
// [Config.Timeout] measures the store, not the queue in front of it: each
// run, a batch's included, gets the timeout from when it is sent, and a
// queued caller waits while the server keeps answering runs. A busy
// process whose burst needs several runs in a row is thus answered in
// full: 400 concurrent Takes whose runs take 100 ms each, behind a 300 ms
// timeout, all get the server's outcome (TestBatchBusyIsNotDown). A
// queued caller gives up only when no run (on a cluster, of its hash
// slot) has been answered for the timeout (the store is down or hung): it leaves the queue and is never
// charged. Once its batch is in flight, it returns with the run: the
// server's outcomes, or the timeout error when the run's deadline passes,
// and then, as for any call that times out, its charge may still apply if
// the server ran the script. A caller waits at most one timeout per run
// ahead of it (the queue divided by MaxBatch), each of which the server
// answered in time, plus its own run's. An error of a batch's script run (a
// connection failure, an OOM from the server) is returned to every caller
// in the batch. A Take sent at once runs under its caller's context
// values (for go-redis hooks such as tracing); a batch's run, shared by
// several callers, runs under none of them.
//
// Time comes from the Redis server (TIME inside the script), so instances
// whose clocks disagree still agree on windows. Keep the Redis hosts' clocks
// synchronised (NTP): a failover to a host whose clock is off moves every
// window by the difference. Nothing a caller sends carries a time; the
// package's own tests drive a fake clock through a test build of the
// scripts whose clock section they replace.
//
// # Leases
//
// A budget with a [core.Leasing] (Budget.Leasing, or leasing: {max, ttl} in a
// policy file) lets a Store take, for a key that is hot on this
// instance, a lease of several units from Redis in one call, and then
// admit that key's requests from the lease in this process, with no call,
// until the lease is spent or ends. It is meant for one key spent by many
// instances (one big tenant's budget at tens of thousands of requests a
// second), where every decision would otherwise be a call to the one
// shard that holds the key. Leasing is decided in the Redis store; the
// memory store is already local and ignores Leasing.
//
//   - Exact. A lease's units are charged in Redis when it is taken (by the
//     lease function, one round trip, which evaluates a take of n units with
//     the algorithms every decision uses), so admitted requests never exceed
//     the quota, in any window, for any number of instances. A lease may be
//     spent only until the end of its window (fixed window, sliding window
//     counter: a unit charged in one window and spent in the next would be
//     counted in the wrong one), its TTL, and, for a token bucket, the
//     bucket's theoretical arrival time before the lease (after it, an exact
//     bucket would have refilled behind the leased tokens and admitted them
//     twice); the instance ends it earlier, by its own monotonic clock,
//     counting from when it sent the call.
//   - Sized to the key's heat. An instance counts each key's decisions; a
//     key is hot, and leased, when at its current rate the instance would
//     spend at least 8 units per TTL. A lease holds what the instance spends
//     in a TTL (at most Leasing.Max, for a token bucket at most the burst),
//     the part of that it can spend before the lease must end, and at most
//     1/16 of what is left of the budget: leases shrink as the budget runs
//     out, and once a lease would hold no unit above the request's cost the
//     instance goes back to one call per decision, so the last units are
//     exact. A key whose traffic falls is decided by one call each again.
//   - Given back. Units a lease has not spent when it ends (its TTL, a new
//     lease replacing it, a changed limit, [Store.Close]) are given back to
//     Redis by a refund of the lease's charge, from a goroutine. A fixed
//     window's units left when its window ends cannot be: they are
//     stranded, and that, with the denials below, is what leasing costs in
//     under-admission. The hot-key benchmark's windows admit their whole
//     quota.
//   - A denial Redis gives for a leased budget is also answered locally for a
//     quarter of the TTL (never past its retry-after), so a key whose budget is
//     spent does not make every instance call Redis per request.
//   - One call at a time per hot key. While a call for a hot key is in
//     flight (a lease, or a decision near the budget's end), the
//     instance's other decisions on that key wait for it (for at most
//     four such calls, and for none after one failed) and then use the
//     lease or the denial it brought, instead of each calling Redis.
//   - Stalls. An instance descheduled while it holds a lease near its
//     window's end strands what it has not spent, as a dead one does:
//     Leasing.Max bounds what one instance can strand per key and window.
//   - A killed instance cannot give back: its leases' unspent units stay
//     charged, at most one lease per hot key, as if spent. They count
//     until the window ends (fixed window), weigh in the next window's
//     estimate (sliding window counter), or drain at the refill rate
//     (token bucket). Giving them back at the lease's expiry without the
//     instance would need Redis to know how much of the lease was spent,
//     that is, a call per decision; exactness is kept instead.
//   - All or nothing. A decision with several budgets takes the costs of
//     its leased budgets from their leases (taking a lease first for a hot
//     key that has none) and sends the others to Redis in one call; if that
//     call denies or fails, the units go back to their leases. When a
//     leased budget cannot be served from a lease, the whole decision goes
//     to Redis. Shadow items, costs of 0 and refunds are
//     never served from a lease; a refund of a leased charge goes to Redis
//     and gives the units back there.
//   - Headers. A decision served from a lease reports as remaining what
//     Redis had left at this instance's last call for the key: units no
//     instance has spent or holds in a lease, this instance's own lease
//     included. It is never more than Redis had left then; it may be up to
//     one lease TTL old, during which the other instances may have spent
//     more. Its reset counts down from that call.
//   - Observed. [Store.LeaseStats] counts leases taken, returned and
//     expired, the units they held, gave back and stranded, and the
//     decisions served locally and by Redis; a [Config].Observer that
//     implements [core.LeaseObserver] (core/metrics does) hears the same.
//   - Costs nothing when unused. A decision with no leased budget takes the
//     path of a store without leasing; it only checks each item's Leasing.
//
// The sliding log, which must record the time of every unit, and shaping
// (leaky bucket), which gives each request its own delay, cannot be
// leased: core.New refuses Leasing on them.
//
// # Redis Cluster
//
// Keys are grouped by hash slot; each group is one script run, and the
// groups of a decision go out in one pipeline, so a decision is still one
// round trip per server involved, made in parallel. A decision whose keys
// all lie in one slot is one script run, batched with the slot's
// concurrent decisions (see Batching). The library (or the
// scripts) is loaded on every master when a server lacks it and the groups
// that failed are retried once. When one group denies after another charged,
// the store takes the other group's charges back (in a second round trip),
// so the decision stays all-or-nothing; while that undo is in flight, a
// concurrent request may see the charge and be denied, which can only
// under-admit. The budgets of one partition share a hash tag (see Key
// layout), so a decision whose budgets are all keyed by one partition
// touches one slot. A [redis.Ring] is supported the same way, grouping by
// hash tag.
//
// Losing a master: when a master stops answering (its process or host
// dies), calls on the keys of its hash slots fail (connection refused, or
// the store's deadline) and their budgets apply their failure mode, until
// the cluster promotes one of its replicas, cluster-node-timeout plus a
// second or two later, and the client learns of it. go-redis re-reads its
// slot map on MOVED and ASK replies and every ClusterStateReloadInterval
// (60 s by default), not when a connection fails, so a client alone would
// go on sending those keys to the dead master for up to that interval. The
// store therefore asks its cluster client to re-read the map
// (ReloadState: one CLUSTER SLOTS, in the background) when a call fails
// without a reply from Redis, at most once per 250 ms per Store, whatever
// the number of failed calls; and the clients [Open] builds re-read it
// every [DefaultClusterStateReloadInterval] while in use. So the dead
// master's keys are decided again soon after the promotion (the next
// re-read), whether the client came from Open or from
// redis.NewClusterClient with default options (TestClusterMasterLoss holds
// it to 3 s after the promotion). Without a replica, they fail until the
// master is back. The other masters' keys keep being decided, except while
// the cluster refuses every key: with cluster-require-full-coverage yes
// (Redis's default) each node answers CLUSTERDOWN from when the master is
// marked failed until the promotion (set it to no to keep the other
// masters serving). Charges the dead master had not yet sent to its
// replica are lost (see What Redis can lose). The store is a
// core.ShardedStore: the engine keeps a circuit breaker per master, so the
// dead master's failed calls open the breaker of its keys alone (they
// then apply their failure mode at once, without waiting for the store's
// deadline), while the other masters' keys go on being decided by Redis;
// once the replica is promoted, its keys go to a new master, whose breaker
// is closed (TestBreakerPerShard). A decision whose budgets' partitions
// are on several masters has a breaker of its own.
//
// The client must match the servers: [New] refuses a single-node client
// (or a Ring) on a cluster-enabled server, which would get MOVED for every
// key outside that node's slots, and a cluster client on servers without
// cluster support. A mismatch found later (MOVED, ASK or CROSSSLOT
// replies to a client that does not follow the cluster's slots) is a store
// error wrapping [core.ErrMisconfigured], which observers report apart
// from outages (kind core.KindStoreMisconfigured; core/metrics:
// store_errors_total{kind="misconfigured"}). The budgets' failure mode
// still applies to it, as to any store error.
//
// Resharding: a cluster client follows MOVED and ASK itself, up to its
// MaxRedirects (3 by default). While a slot is handed over in an order
// other than the one Redis documents (CLUSTER SETSLOT ... NODE on the
// source before the target, or MIGRATING on the source before IMPORTING
// on the target), the two masters send the slot's commands to each other
// until the operator's next step, and the client runs out of redirects;
// TRYAGAIN (a slot migrating) can outlast them too. None of these replies
// means the script ran, so the store runs the call again, after pauses
// doubling from 1 ms to 16 ms, while the call's deadline leaves time (for
// a call whose items span several hash slots, half of it: the other half
// is kept for giving back the other slots' charges). A call still
// redirected at its deadline is a plain store error (kind
// core.KindStoreError) that says a hash slot is being handed over, never
// a misconfiguration; TestReshardInTheWrongOrder holds both orders to it.
//
// # Key layout
//
// The budgets of one partition share one hash:
//
//	<prefix>{<partition>}#h               e.g. quotagate:{tenant:42}#h
//
// The prefix is [Config.Prefix] (default "quotagate:"). A partition of 1
// to 64 letters, digits and "-._:/@=+" is used as it is; any other (long,
// empty, or holding spaces, braces, control or non-ASCII bytes) is replaced
// by '#' and 32 hex digits of its SHA-256, so keys are bounded and safe to
// log. Partitions are not secrets: hash identities such as API keys before
// they become partitions (package keyfunc does). The hash has one field
// per budget of the partition, named by the budget (names longer than 128
// bytes or holding bytes other than printable ASCII are hashed), holding
// its algorithm, its window in µs and the three fields of core's state as
// little-endian integers, and a field "\x00" holding the expiry the key's
// TTL was last set for. A decision reads only the fields of its own
// budgets (one HMGET per partition) and writes only those it charged (one
// HSET), so what it costs the server does not depend on how many other
// budgets (of every engine sharing the prefix) are keyed by the same
// partition. A sliding log keeps its entries in a hash of its own,
//
//	<prefix>{<partition>}:<budget>        e.g. quotagate:{tenant:42}:t_mutate
//
// (fields t, s, l, h and one "<µs> <units>" field per entry), and its field
// in the partition's hash holds its expiry. [Store.Key] and
// [Store.LogKey] return these keys. A concurrency budget
// ([core.Concurrency]) keeps its slots in a sorted set of its own, and no
// field in the partition's hash,
//
//	<prefix>{<partition>}%<budget>        e.g. quotagate:{tenant:42}%exports
//
// one member per unit of a slot ("<id>", "<id>.2", ...), scored with the
// end of its lease in µs (the take's server time plus the budget's
// window). A take drops the members whose lease has ended, counts the
// rest (ZCARD) and adds the new slot's, all in the same script run as the
// decision's other budgets; the slot's id (the take's time, moved on until
// it is unique in the set) comes back as the outcome's Stamp, and the
// refund removes exactly that slot's members. The set's TTL is the newest
// lease; it is deleted with its last member. A slot whose instance died, or
// whose release failed, is reclaimed when its lease ends; leases are not
// renewed (see [core.Concurrency]). The braces make every key of one
// partition share a hash slot in Redis Cluster. The stored algorithm and
// window make a budget whose algorithm or window changed start from an
// empty state, as the memory store does; a changed quota applies to the
// existing state at the next request (keys never embed the quota).
//
// Every key carries a TTL, set by the same script that writes it. A
// sliding log's is the time until its state is equivalent to an empty one
// (core's expiry), rounded up to the millisecond. A partition's hash lives
// until the latest expiry any of its budgets was written with: a write
// that makes that later sets the TTL (PEXPIRE) and the "\x00" field; any
// other write keeps the TTL (HSET leaves it). A budget whose state is
// already equivalent to an empty one when written is deleted from the hash
// (HDEL) rather than written. When the budget whose expiry set the TTL
// expires sooner (a refund, or a window made shorter), the script reads
// the whole hash once (HGETALL) and shortens the TTL to the latest expiry
// left, or deletes the hash when none is left; so the TTL is never longer
// than the longest-lived budget of the partition needs. Fields of budgets
// no longer used stay until the hash expires. Nothing is left behind once
// the windows have passed.
//
// Upgrading from earlier versions: they kept a partition's records in a
// string at <prefix>{<partition>} (and, before that, one key per budget at
// <prefix>{<partition>}:<budget>). This version neither reads nor writes
// those keys, so nothing is misread and no call fails on their type: the
// new layout starts from empty budgets, instances of the old and the new
// version count separately during a rolling upgrade (a client may get up
// to the sum of both budgets until the old instances are gone), and the
// old keys expire on their own. Sliding logs are the exception, since
// their key keeps its name and format: old instances read the entries new
// ones add, and a new instance that finds no field for the log in the
// partition's hash starts the log afresh, dropping what old instances
// counted in it. Either way the effect is bounded by the upgrade's
// duration.
//
// # Failures
//
// Every Take and Refund runs under its own deadline, [Config.Timeout]
// (50 ms by default), detached from the request's cancellation
// (context.WithoutCancel), so a client that hangs up cannot leave a half-done
// call, and a slow or unreachable Redis costs a request at most the
// deadline. The error is returned to the engine, which applies the budget's
// failure mode: fail-open (the default), fail-closed
// ([core.ReasonUnavailable]), or a local in-memory fallback, reports it to
// its Observer, and opens its circuit breaker after repeated failures so that
// an outage stops costing even the deadline. go-redis honours a context's
// deadline only when the client has ContextTimeoutEnabled, which [New]
// therefore requires (unless Timeout is negative).
//
// A call that times out may still have run on the server: its charge
// stands although the engine treated the call as failed (see Batching for
// a decision that times out while its batch is in flight). A script run
// writes the partitions' keys once, at its end, and a sliding log as it
// charges it; a run that fails part-way (an OOM while it writes) may leave
// some of those writes done, as a Redis script is not rolled back. go-redis also
// retries commands whose connection broke (MaxRetries, default 3), which can
// run a script twice; set MaxRetries to -1 on the store's client to rule
// that out.
//
// # What Redis can lose
//
// Every key the store writes carries a TTL (see Key layout); what a full
// Redis does is its maxmemory-policy's choice:
//
//   - Under noeviction a write fails with OOM: each budget applies its
//     failure mode, reported and logged like any store error. Nothing is
//     forgotten silently.
//   - Under an eviction policy an evicted key starts afresh, which
//     over-admits its client once (about one quota more). Under
//     allkeys-lru the keys used least recently go first (Redis
//     approximates LRU by sampling): a client sending now, at its limit or
//     not, keeps its counters, since every decision reads them
//     (TestEvictionKeepsActiveClients). Under volatile-ttl a client at its
//     limit adds nothing to its sliding log, whose TTL then runs down
//     first, so the clients already denied get their quota back first.
//   - A sliding log keeps its entries in a key of its own, and its units
//     and expiry in its partition's record as well. When Redis evicts the
//     entries' key alone (the partition's key, kept in use by the
//     partition's other budgets, stays), the store rebuilds the log as
//     one entry of all its units at the newest entry's time: the client
//     gets no fresh quota, and may wait until that newest entry leaves
//     the window (TestEvictedLogKeepsItsCount). The other way round
//     does not arise under allkeys-lru or volatile-ttl: every decision
//     on a log reads its partition's key, which is thus never less
//     recently used than the log's key, and never expires sooner.
//
// Which policy to set, and why the instance should be the limiter's
// alone, is in the guide docs/redis.md.
//
// A server that comes back empty (restarted without persistence, or
// replaced by an empty one) has forgotten every charge, slot and lease:
// each key starts afresh, as one never charged, while instances go on
// admitting from the leases they hold until those end. One restart can
// thus let through about one quota more per key, once: a window's whole
// quota again in the window under way, a bucket's burst, a concurrency
// budget's slots while the requests that held them still run. A server
// restarted from its AOF file loses only the charges it had not yet
// written to it (with appendfsync everysec, about the last second's).
//
// Redis replication is asynchronous: after a failover (Sentinel or
// Cluster) the new primary may lack the last acknowledged charges, and
// clients are over-admitted until the windows roll over. WAIT cannot close
// that gap. While Sentinel replaces a master that died, a failover
// client's calls fail (each budget's failure mode applies: about 1.2 s in
// the tests, with down-after-milliseconds 500), then go to the promoted
// replica.
//
// A planned Sentinel failover (SENTINEL FAILOVER) loses more, and
// silently, unless the store watches the Sentinels ([Config.Sentinel]):
// see Planned Sentinel failovers.
//
// Limits enforced here are therefore approximate under failover,
// restarts and eviction: they protect capacity and fairness, but counters
// in Redis are not a control for money movement or any limit that must
// never be exceeded; enforce those in a transactional store.
//
// Never point the store's client at replicas: limiter state is read and
// written by the same script on the primary.
//
// # Planned Sentinel failovers
//
// In a planned failover (SENTINEL FAILOVER, or any failover of a master
// the clients still reach) Sentinel promotes the replica with SLAVEOF NO
// ONE, but the old master stays writable, and the failover client keeps
// sending to it until Sentinel announces the switch (+switch-master),
// once it has seen the promotion: most of a second later with one
// replica, more with several (Sentinel reconfigures them before it
// announces). The old master discards what it took meanwhile when Sentinel
// makes it a replica of the new one, seconds later. No call fails, so no
// failure mode applies: those charges are acknowledged and lost,
// silently.
//
// With [Config.Sentinel], the store watches the Sentinels of its master
// and refuses the calls of that window instead:
//
//	opt := &redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: addrs, ContextTimeoutEnabled: true}
//	store, err := redisstore.New(redis.NewFailoverClient(opt), redisstore.Config{
//		Sentinel: &redisstore.SentinelWatch{Addrs: addrs, MasterName: "mymaster"},
//	})
//	...
//	defer store.Close() // ends the watch
//
// The watch works as follows.
//
//   - Watched. A goroutine per Sentinel (those given, and those they know
//     of for the master) subscribes to its events. When a subscription
//     breaks, the store logs it, subscribes again after pauses doubling
//     from 100 ms to 5 s, and catches up with SENTINEL MASTER; a
//     connection that stops answering its PING (one a second when idle) is
//     replaced.
//   - Refused from the election. The store starts refusing when a
//     Sentinel is elected to perform a failover of the master
//     (+elected-leader; any later event of the failover, if it missed that
//     one). The elected Sentinel sends SLAVEOF NO ONE two of its ticks
//     later (each 50 to 100 ms), so calls already on their way to the old
//     master are answered and replicated before the promotion. An earlier
//     event would not do better: +try-failover is also sent by Sentinels
//     that then lose the election, and wait up to its timeout (10 s)
//     before they give up.
//   - Refused fast. Every script run (takes, refunds, leases, peeks)
//     fails with [ErrFailingOver] before anything is sent, at the cost of
//     one atomic load per run otherwise. Each budget applies its failure
//     mode; the engine reports and logs the error (kind store_error;
//     errors.Is tells it apart), and the store logs when it starts and when
//     it stops refusing, with the calls it refused. A refused refund
//     leaves its charge, a refused lease refund strands its units.
//   - Until the client has left the old master. The store sends calls
//     again when the failover is aborted (-failover-abort-*), or once it is
//     announced (+switch-master) and the store's client answers from
//     another server than when the failover began (INFO server's run_id,
//     probed every few milliseconds). A failover client listening to
//     another Sentinel, which learns of the switch seconds later, is
//     waited for. A failover that neither ends nor is followed within
//     [SentinelWatch.MaxRefusal] (30 s by default) stops being refused,
//     with an error logged.
//
// What it costs: the calls of the window fail (about a second with one
// replica in the tests), where without the watch they were counted on a
// server that forgot them; the engine's circuit breaker may open
// meanwhile, as for any run of failures. A decision that answers costs one
// atomic load more, which BenchmarkRedis's watched rows do not tell apart
// from the unwatched ones. Each Sentinel gets one more subscription.
// TestSentinelPlannedFailover and TestSentinelFailoverOnAnotherSentinel
// charge two algorithms from four goroutines through a failover client
// during SENTINEL FAILOVER: without the watch, charges are lost; with it,
// the new master holds every charge the store acknowledged.
//
// What it does not close: the charges a dead or unreachable master had not
// yet sent to its replica (see What Redis can lose); and a call sent to the
// old master before the store started refusing that reaches it after the
// promotion, two Sentinel ticks later.
//
// Without the watch, setting min-replicas-to-write on every server to the
// number of replicas also turns the loss into store errors, while the
// promoted master waits for a replica; the price is that a master refuses
// every write while any of its replicas is missing.
package redisstore
