package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
)

// How leases are sized and when they are taken (see the package
// documentation, Leases).
const (
	// leaseShare: a lease takes at most 1/leaseShare of what is left of
	// the budget, so leases shrink as it runs out, and an instance goes
	// back to one call per decision once a lease would hold no unit above
	// the request's cost: the last leaseShare units or so are exact.
	leaseShare = 16
	// leaseHot: a key is hot, and leased, when this instance decided at
	// least leaseHot times per lease TTL over the last heat tick.
	leaseHot = 8
	// heatTick is how often a key's local rate is measured.
	heatTick = 50 * time.Millisecond
	// maxLeaseEntries bounds the keys a Store tracks for leasing; keys
	// beyond it are decided by one call each, as without leasing.
	maxLeaseEntries = 1 << 16
	leaseShards     = 16
	// giveBackTimeout bounds a call giving units back.
	giveBackTimeout = time.Second
)

// monoBase anchors mono.
var monoBase = time.Now()

// mono returns a monotonic time in nanoseconds.
func mono() int64 { return int64(time.Since(monoBase)) }

// leased reports whether any item may be served from a lease.
func leased(items []core.Item) bool {
	for i := range items {
		if leasable(&items[i]) {
			return true
		}
	}
	return false
}

// leasable reports whether it may be served from a lease: a budget that
// leases, not shadow, with a cost.
func leasable(it *core.Item) bool {
	if it.Limit.Leasing.Max <= 0 || it.Shadow || it.Cost <= 0 {
		return false
	}
	switch it.Limit.Algorithm {
	case core.FixedWindow, core.SlidingWindow, core.TokenBucket:
		return true
	}
	return false
}

// A leaser holds a Store's leases: one entry per (budget, key) of a
// budget that leases, with the key's local rate, the lease the store holds
// for it, and what the last reply from Redis said about it.
type leaser struct {
	s      *Store
	obs    core.LeaseObserver
	seed   maphash.Seed
	shards [leaseShards]leaseShard
	n      atomic.Int64 // entries
	closed atomic.Bool
	killed atomic.Bool    // tests: an instance that died
	wg     sync.WaitGroup // give-backs in flight

	taken, takenUnits       atomic.Int64
	returned, returnedUnits atomic.Int64
	expired, expiredUnits   atomic.Int64
	stranded                atomic.Int64
	local, remote           atomic.Int64
}

type leaseShard struct {
	mu sync.RWMutex
	m  map[leaseKey]*leaseEntry
}

type leaseKey struct{ budget, key string }

// A leaseEntry is one key's lease state; mu guards every field.
type leaseEntry struct {
	mu   sync.Mutex
	item core.Item // the budget, key and limit of the lease (Cost unused)
	last int64     // mono ns of the last decision

	// The key's local rate: decisions counted since tick (mono ns), and
	// the rate over the last tick (per second).
	tick  int64
	count int64
	rate  float64

	// The lease: units charged in Redis at stamp (server µs) and not spent
	// yet, spendable until until (mono ns). A fixed window's units cannot
	// be given back after windowEnd (mono ns; 0 for other algorithms).
	// chargeReset is the charge's Reset (refunds of bucket charges).
	units       int64
	stamp       int64
	chargeReset time.Duration
	until       int64
	windowEnd   int64
	gen         uint64
	timer       *time.Timer

	// What the last reply from Redis said: remaining after it, when the
	// budget is full again (mono ns), and, after a denial of deniedCost,
	// until when denials of at least that cost are served locally and when
	// the request could retry (mono ns).
	remaining    int64
	replyStamp   int64
	resetAt      int64
	deniedUntil  int64
	deniedCost   int64
	retryAt      int64
	noLeaseUntil int64 // mono ns: one call per decision until then

	// busy is set while a call for this key is in flight, a lease's or,
	// for a hot key, a decision's; ready is closed when it returns.
	busy  bool
	ready chan struct{}
	// failed reports whether the last call for this key failed.
	failed bool

	// Decisions not yet reported to the observer.
	servedLocal, servedStore int64
}

func newLeaser(s *Store, obs core.Observer) *leaser {
	l := &leaser{s: s, seed: maphash.MakeSeed()}
	l.obs, _ = obs.(core.LeaseObserver)
	for i := range l.shards {
		l.shards[i].m = map[leaseKey]*leaseEntry{}
	}
	return l
}

// entry returns it's entry, creating it, or nil when the table is full.
func (l *leaser) entry(it *core.Item) *leaseEntry {
	k := leaseKey{it.Budget, it.Key}
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(it.Budget)
	h.WriteByte(0)
	h.WriteString(it.Key)
	sh := &l.shards[h.Sum64()%leaseShards]
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	if e != nil {
		return e
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e = sh.m[k]; e != nil {
		return e
	}
	now := mono()
	if l.n.Load() >= maxLeaseEntries {
		l.sweep(sh, now)
		if l.n.Load() >= maxLeaseEntries {
			return nil
		}
	}
	e = &leaseEntry{item: core.Item{Budget: it.Budget, Key: it.Key, Limit: it.Limit}, tick: now, last: now}
	sh.m[k] = e
	l.n.Add(1)
	return e
}

// sweep drops the entries of sh (locked) that hold no lease and saw no
// decision for ten heat ticks.
func (l *leaser) sweep(sh *leaseShard, now int64) {
	for k, e := range sh.m {
		e.mu.Lock()
		idle := e.units == 0 && !e.busy && now-e.last > int64(10*heatTick)
		e.mu.Unlock()
		if idle {
			delete(sh.m, k)
			l.n.Add(-1)
		}
	}
}

// served is what a heat tick reports: decisions served locally and by
// Redis since the last report.
type served struct {
	budget        string
	local, remote int64
}

// observe counts a decision in e's rate (e.mu held) and returns what to
// report when a tick ended.
func (e *leaseEntry) observe(now int64) (rep served) {
	e.last = now
	e.count++
	if d := now - e.tick; d >= int64(heatTick) {
		e.rate = float64(e.count) * 1e9 / float64(d)
		e.count, e.tick = 0, now
		rep = served{e.item.Budget, e.servedLocal, e.servedStore}
		e.servedLocal, e.servedStore = 0, 0
	}
	return rep
}

// want is the size of a lease for e (e.mu held): what this instance spends
// in a TTL at its current rate, at most Leasing.Max (and a token bucket's
// burst); 0 when the key is not hot.
func (e *leaseEntry) want(lim *core.Limit) int64 {
	ttl := lim.Leasing.TTL.Seconds()
	n := e.rate * ttl
	if n < leaseHot {
		return 0
	}
	w := int64(math.Ceil(n))
	if lim.Algorithm == core.TokenBucket && w > lim.Burst {
		w = lim.Burst
	}
	return min(w, lim.Leasing.Max)
}

func (l *leaser) report(r served) {
	if l.obs == nil || r.budget == "" {
		return
	}
	if r.local > 0 {
		l.obs.ObserveLease(r.budget, core.LeaseServedLocal, r.local)
	}
	if r.remote > 0 {
		l.obs.ObserveLease(r.budget, core.LeaseServedStore, r.remote)
	}
}

// take is Store.Take for items of which at least one is leasable.
func (l *leaser) take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if l.closed.Load() {
		return l.s.takeRemote(ctx, items, out)
	}
	if len(items) == 1 {
		return l.takeOne(ctx, items, out)
	}
	return l.takeMany(ctx, items, out)
}

// takeOne decides a single leasable item: from the key's lease, from a
// denial Redis gave lately, by taking a lease that also charges the
// request when the key is hot, or else by one call.
//
// For a hot key, one call at a time is in flight (busy), a lease's or a
// decision's: the decisions that arrive meanwhile wait for it, and then
// find the new lease or the denial it brought, rather than each making a
// call of its own. While it is in flight, a denial Redis gave is still
// answered locally until its retry-after.
func (l *leaser) takeOne(ctx context.Context, items []core.Item, out []core.Outcome) error {
	it, o := &items[0], &out[0]
	e := l.entry(it)
	if e == nil {
		l.remote.Add(1)
		return l.s.takeRemote(ctx, items, out)
	}
	e.mu.Lock()
	// Read with e locked, so that no decision on e is made at a time
	// older than one made before it (a lease spent after it expired).
	now := mono()
	rep := e.observe(now)
	l.adopt(e, &it.Limit, now)
	hot, done, err := l.serveFromLease(ctx, e, it, o, now)
	if done {
		e.mu.Unlock()
		l.report(rep)
		return err
	}
	e.servedStore++
	l.remote.Add(1)
	single := hot && !e.busy
	if single {
		e.busy, e.ready = true, make(chan struct{})
	}
	e.mu.Unlock()
	l.report(rep)
	return l.callStore(ctx, e, items, out, single)
}

// serveFromLease decides it at now (e.mu held) from e's lease or a denial
// Redis gave lately, waiting for at most maxWaits calls of others in
// flight for a hot key, or takes a lease that also charges it when the
// key is hot and no call is in flight. It reports whether it decided
// (with the error of the lease's call), and whether the key is hot.
func (l *leaser) serveFromLease(ctx context.Context, e *leaseEntry, it *core.Item, o *core.Outcome, now int64) (hot, done bool, err error) {
	for round := 0; ; round++ {
		if l.spend(e, it.Cost, now, o) {
			return hot, true, nil
		}
		want := e.want(&it.Limit)
		hot = want > it.Cost && !l.closed.Load()
		if !hot || round == maxWaits {
			return hot, false, nil
		}
		if e.busy {
			if round > 0 && e.failed {
				// The call waited for failed: make one's own rather
				// than wait for another.
				return hot, false, nil
			}
			ready := e.ready
			e.mu.Unlock()
			select {
			case <-ready:
			case <-ctx.Done():
			}
			e.mu.Lock()
			now = mono()
			continue
		}
		if now >= e.noLeaseUntil {
			return hot, true, l.acquire(ctx, e, it, it.Cost, want, o)
		}
		return hot, false, nil
	}
}

// callStore decides items, one leasable item of e, by one call to Redis,
// and records the reply in e. single says the call is the key's one in
// flight (busy), which callStore ends.
func (l *leaser) callStore(ctx context.Context, e *leaseEntry, items []core.Item, out []core.Outcome, single bool) error {
	sent := mono()
	err := l.s.takeRemote(ctx, items, out)
	if err == nil || single {
		e.mu.Lock()
		if err == nil {
			e.learn(&items[0], &out[0], sent)
		}
		if single {
			e.busy, e.failed = false, err != nil
			close(e.ready)
		}
		e.mu.Unlock()
	}
	return err
}

// maxWaits bounds how many calls of others a decision waits for before
// it makes its own.
const maxWaits = 4

// adopt makes e's limit lim (e.mu held): a lease or a reply under another
// limit (a quota resolved otherwise) says nothing about this one.
func (l *leaser) adopt(e *leaseEntry, lim *core.Limit, now int64) {
	if e.item.Limit == *lim {
		return
	}
	l.end(e, now, core.LeaseReturned)
	e.item.Limit = *lim
	e.remaining, e.resetAt, e.noLeaseUntil = 0, 0, 0
	e.deniedUntil, e.deniedCost, e.retryAt = 0, 0, 0
}

// spend serves cost at now from e's lease, or denies it from a denial
// Redis gave lately, and reports whether it did (e.mu held).
func (l *leaser) spend(e *leaseEntry, cost, now int64, o *core.Outcome) bool {
	if e.units > 0 && now >= e.until {
		l.end(e, now, core.LeaseExpired)
	}
	switch {
	case e.units >= cost && now < e.until:
		e.units -= cost
		*o = core.Outcome{Allowed: true, Charged: true, Remaining: e.remaining,
			Reset: nsDuration(e.resetAt - now), Stamp: e.stamp}
	case e.deniedCost > 0 && cost >= e.deniedCost && (now < e.deniedUntil || e.busy && now < e.retryAt):
		*o = core.Outcome{Remaining: e.remaining, Reset: nsDuration(e.resetAt - now),
			RetryAfter: max(time.Microsecond, nsDuration(e.retryAt-now)), Stamp: e.replyStamp}
	default:
		return false
	}
	e.servedLocal++
	l.local.Add(1)
	return true
}

// nsDuration rounds ns up to a whole µs, at least 0.
func nsDuration(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration((ns+999)/1000) * time.Microsecond
}

// learn records what Redis answered for it (outcome o) to a call sent at
// sent (mono ns), e.mu held: a denial is served locally for a while (see
// denialFor).
func (e *leaseEntry) learn(it *core.Item, o *core.Outcome, sent int64) {
	if e.item.Limit != it.Limit {
		return
	}
	e.remaining, e.replyStamp = o.Remaining, o.Stamp
	e.resetAt = sent + int64(o.Reset)
	e.deniedUntil, e.deniedCost = 0, 0
	if !o.Allowed {
		e.deniedCost = it.Cost
		e.retryAt = sent + int64(o.RetryAfter)
		e.deniedUntil = sent + min(int64(o.RetryAfter), denialFor(&it.Limit))
	}
}

// denialFor is how long a denial from Redis is served locally: a quarter
// of the lease TTL, and never past the denial's retry-after. Capacity that
// comes back sooner (another instance's lease given back, a refund) waits
// that long; for a fixed window, whose capacity only comes back at the
// window's end, that is the only under-admission it costs.
func denialFor(lim *core.Limit) int64 { return int64(lim.Leasing.TTL / 4) }

// acquire takes a lease for e (e.mu held; it is released during the call)
// of up to want units, that also charges cost for the request whose
// outcome goes to o (cost 0: none). Whatever e's old lease holds is given
// back first.
func (l *leaser) acquire(ctx context.Context, e *leaseEntry, it *core.Item, cost, want int64, o *core.Outcome) error {
	l.end(e, mono(), core.LeaseReturned)
	e.busy, e.ready = true, make(chan struct{})
	lim := it.Limit
	e.mu.Unlock()
	sent := mono()
	r, err := l.call(ctx, it, cost, want)
	e.mu.Lock()
	e.busy, e.failed = false, err != nil
	close(e.ready)
	if err != nil {
		return err
	}
	if cost > 0 {
		e.servedStore++
		l.remote.Add(1)
	}
	*o = r.outcome
	if e.item.Limit != lim || l.closed.Load() {
		// The limit changed, or the store closed, meanwhile: give the
		// lease back at once.
		if extra := r.n - cost; extra > 0 {
			l.giveBack(e.item.Budget, e.item.Key, lim, extra, r.outcome.Stamp, r.outcome.Reset, core.LeaseReturned)
		}
		return nil
	}
	e.learn(it, &r.outcome, sent)
	extra := r.n - cost
	if extra <= 0 {
		if r.outcome.Allowed {
			// Near the budget's end: one call per decision for a while.
			e.noLeaseUntil = sent + min(int64(lim.Leasing.TTL/4), int64(r.outcome.Reset))
		}
		return nil
	}
	e.units, e.stamp, e.chargeReset = extra, r.outcome.Stamp, r.outcome.Reset
	e.until = sent + int64(r.valid)
	e.windowEnd = 0
	if lim.Algorithm == core.FixedWindow {
		// A fixed window's reset is the end of its window.
		e.windowEnd = sent + int64(r.outcome.Reset)
	}
	e.gen++
	if e.timer == nil {
		e.timer = time.AfterFunc(time.Duration(e.until-mono()), func() { l.expire(e) })
	} else {
		e.timer.Reset(time.Duration(e.until - mono()))
	}
	l.taken.Add(1)
	l.takenUnits.Add(extra)
	if l.obs != nil {
		l.obs.ObserveLease(it.Budget, core.LeaseTaken, extra)
	}
	return nil
}

// expire ends e's lease when its time has come (its timer).
func (l *leaser) expire(e *leaseEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now := mono(); e.units > 0 && now >= e.until {
		l.end(e, now, core.LeaseExpired)
	}
}

// end ends e's lease (e.mu held), giving its unspent units back: as
// event (LeaseExpired or LeaseReturned), or as stranded when a fixed
// window's units can no longer be.
func (l *leaser) end(e *leaseEntry, now int64, event core.LeaseEvent) {
	u := e.units
	if u == 0 {
		return
	}
	e.units = 0
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.windowEnd != 0 && now >= e.windowEnd {
		l.strand(e.item.Budget, u)
		return
	}
	l.giveBack(e.item.Budget, e.item.Key, e.item.Limit, u, e.stamp, e.chargeReset, event)
}

func (l *leaser) strand(budget string, u int64) {
	l.stranded.Add(u)
	if l.obs != nil {
		l.obs.ObserveLease(budget, core.LeaseStranded, u)
	}
}

// giveBack gives u units charged at stamp back to Redis, on a goroutine
// of its own: a Refund of a take of u units.
func (l *leaser) giveBack(budget, key string, lim core.Limit, u, stamp int64, reset time.Duration, event core.LeaseEvent) {
	if l.killed.Load() {
		l.stranded.Add(u)
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
		defer cancel()
		items := [1]core.Item{{Budget: budget, Key: key, Limit: lim, Cost: u}}
		outs := [1]core.Outcome{{Allowed: true, Charged: true, Stamp: stamp, Reset: reset}}
		if err := l.s.Refund(ctx, items[:], outs[:]); err != nil {
			l.strand(budget, u)
			return
		}
		if event == core.LeaseExpired {
			l.expired.Add(1)
			l.expiredUnits.Add(u)
		} else {
			l.returned.Add(1)
			l.returnedUnits.Add(u)
		}
		if l.obs != nil {
			l.obs.ObserveLease(budget, event, u)
		}
	}()
}

// takeMany decides several items of which some are leasable, all or
// nothing: the leasable items' costs are reserved from their leases
// (taking a lease first for a hot key that has none), and the other items
// go to Redis in one call; if that call denies or fails, the reserved
// units go back to their leases. When a leasable item cannot be served
// from a lease, the whole decision goes to Redis, as without leasing.
func (l *leaser) takeMany(ctx context.Context, items []core.Item, out []core.Outcome) error {
	var res [maxItems]reservation
	ok, err := l.reserve(ctx, items, out, res[:])
	if err != nil {
		return err
	}
	if !ok {
		l.unreserve(items, res[:len(items)])
		return l.takeUnleased(ctx, items, out)
	}
	called, denied, err := l.takeRest(ctx, items, out, res[:])
	if err != nil {
		l.unreserve(items, res[:len(items)])
		return err
	}
	l.countReserved(out, res[:len(items)], denied)
	if denied {
		l.unreserve(items, res[:len(items)])
	}
	if called {
		l.remote.Add(1)
	} else {
		l.local.Add(1)
	}
	return nil
}

// reserve reserves each leasable item's cost in res, from its key's lease,
// with its allowed outcome in out. It stops at, and reports false for, the
// first leasable item a lease cannot serve; on an error taking a lease,
// it puts back what it reserved.
func (l *leaser) reserve(ctx context.Context, items []core.Item, out []core.Outcome, res []reservation) (bool, error) {
	for i := range items {
		it := &items[i]
		if !leasable(it) {
			continue
		}
		r, err := l.reserveItem(ctx, it, &out[i])
		if err != nil {
			l.unreserve(items, res[:i])
			return false, err
		}
		if r.e == nil {
			return false, nil
		}
		res[i] = r
	}
	return true, nil
}

// reserveItem takes it's cost from its key's lease, taking a lease first
// when the key is hot and its lease cannot serve it, and sets o to the
// allowed outcome. It returns no reservation (a nil e) when no lease can
// serve it.
func (l *leaser) reserveItem(ctx context.Context, it *core.Item, o *core.Outcome) (reservation, error) {
	e := l.entry(it)
	if e == nil {
		return reservation{}, nil
	}
	e.mu.Lock()
	now := mono() // with e locked: see takeOne
	rep := e.observe(now)
	l.adopt(e, &it.Limit, now)
	if e.units < it.Cost || now >= e.until {
		if want := e.want(&it.Limit); want > 0 && !e.busy && now >= e.noLeaseUntil && !l.closed.Load() {
			var pre core.Outcome
			if err := l.acquire(ctx, e, it, 0, want, &pre); err != nil {
				e.mu.Unlock()
				l.report(rep)
				return reservation{}, err
			}
			now = mono()
		}
	}
	var r reservation
	if e.units >= it.Cost && now < e.until {
		e.units -= it.Cost
		r = reservation{e, e.gen}
		*o = core.Outcome{Allowed: true, Charged: true, Remaining: e.remaining,
			Reset: nsDuration(e.resetAt - now), Stamp: e.stamp}
	}
	e.mu.Unlock()
	l.report(rep)
	return r, nil
}

// takeUnleased decides all items by one call to Redis, as without
// leasing, and records the reply for each leasable item's key.
func (l *leaser) takeUnleased(ctx context.Context, items []core.Item, out []core.Outcome) error {
	l.remote.Add(1)
	sent := mono()
	err := l.s.takeRemote(ctx, items, out)
	if err != nil {
		return err
	}
	for i := range items {
		if leasable(&items[i]) {
			if e := l.entry(&items[i]); e != nil {
				e.mu.Lock()
				e.servedStore++
				e.learn(&items[i], &out[i], sent)
				e.mu.Unlock()
			}
		}
	}
	return nil
}

// takeRest decides the items that hold no reservation in res by one call
// to Redis, if there are any, and puts their outcomes in out. It reports
// whether it made the call, and whether Redis denied one of them (a
// shadow budget's denial does not count).
func (l *leaser) takeRest(ctx context.Context, items []core.Item, out []core.Outcome, res []reservation) (called, denied bool, err error) {
	var rest [maxItems]core.Item
	var restIdx [maxItems]int
	nrest := 0
	for i := range items {
		if res[i].e == nil {
			rest[nrest], restIdx[nrest] = items[i], i
			nrest++
		}
	}
	if nrest == 0 {
		return false, false, nil
	}
	var sub [maxItems]core.Outcome
	if err := l.s.takeRemote(ctx, rest[:nrest], sub[:nrest]); err != nil {
		return true, false, err
	}
	for j := 0; j < nrest; j++ {
		out[restIdx[j]] = sub[j]
		if !sub[j].Allowed && !rest[j].Shadow {
			denied = true
		}
	}
	return true, denied, nil
}

// countReserved counts the decision for each reserved item's key: served
// locally, or, when the decision was denied, by the store, its outcome in
// out then allowed but uncharged.
func (l *leaser) countReserved(out []core.Outcome, res []reservation, denied bool) {
	for i := range res {
		if e := res[i].e; e != nil {
			e.mu.Lock()
			if denied {
				// Described as core's uncharged: allowed, nothing charged.
				out[i].Charged = false
				e.servedStore++
			} else {
				e.servedLocal++
			}
			e.mu.Unlock()
		}
	}
}

// unreserve puts the units reserved for items (res[i].e != nil) back: into
// their lease when it is the one they came from and still live, otherwise
// back to Redis.
func (l *leaser) unreserve(items []core.Item, res []reservation) {
	for i := range res {
		e := res[i].e
		if e == nil {
			continue
		}
		res[i].e = nil
		e.mu.Lock()
		now := mono()
		if e.gen == res[i].gen && now < e.until {
			e.units += items[i].Cost
		} else if e.windowEnd == 0 || now < e.windowEnd {
			l.giveBack(e.item.Budget, e.item.Key, items[i].Limit, items[i].Cost, e.stamp, e.chargeReset, core.LeaseReturned)
		} else {
			l.strand(e.item.Budget, items[i].Cost)
		}
		e.mu.Unlock()
	}
}

// A reservation is a leasable item's cost taken from the lease of
// generation gen of e, in takeMany.
type reservation struct {
	e   *leaseEntry
	gen uint64
}

// leaseReply is what the lease script answered.
type leaseReply struct {
	outcome core.Outcome
	n       int64 // units charged, the request's cost included
	valid   time.Duration
}

// call runs the lease script for it: up to want units, cost of them for
// the request.
func (l *leaser) call(ctx context.Context, it *core.Item, cost, want int64) (leaseReply, error) {
	s := l.s
	c := getCall()
	defer putCall(c)
	pk, _, _ := partitionKey(s.prefix, it.Key)
	c.keys = append(c.keys, pk)
	b := append(c.blob, 0) // flags
	lim := &it.Limit
	b = append(b, recordName(it.Budget)...)
	b = append(b, 0, byte(lim.Algorithm))
	b = appendInt(b, lim.Window.Microseconds())
	b = appendInt(b, lim.Quota)
	b = appendInt(b, lim.Burst)
	b = appendInt(b, cost)
	b = appendInt(b, want)
	b = appendInt(b, leaseShare)
	b = appendInt(b, lim.Leasing.TTL.Microseconds())
	c.blob = b
	rc := s.callContext(ctx)
	defer rc.release()
	ctx = rc
	reply, err := s.run(ctx, leaseFn, c.keys, b).Text()
	if err != nil {
		return leaseReply{}, storeError("lease", err)
	}
	r, err := parseLeaseReply(reply, cost, want)
	if err != nil {
		return leaseReply{}, storeError("lease", err)
	}
	return r, nil
}

// parseLeaseReply reads the lease script's reply: now, allowed, n,
// remaining, reset µs, wait µs, valid µs.
func parseLeaseReply(reply string, cost, want int64) (leaseReply, error) {
	if len(reply) != 7*8 {
		return leaseReply{}, fmt.Errorf("malformed lease reply: %d bytes", len(reply))
	}
	var v [7]int64
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64([]byte(reply[8*i : 8*i+8])))
	}
	now, allowed, n, rem, reset, wait, valid := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	if allowed < 0 || allowed > 1 || n < 0 || n > want || (allowed == 1 && n < cost) || rem < 0 ||
		!durationMicros(reset) || !durationMicros(wait) || !durationMicros(valid) {
		return leaseReply{}, fmt.Errorf("malformed lease reply: out of range")
	}
	r := leaseReply{n: n, valid: time.Duration(valid) * time.Microsecond}
	r.outcome = core.Outcome{Allowed: allowed == 1, Charged: allowed == 1 && cost > 0, Remaining: rem,
		Reset: time.Duration(reset) * time.Microsecond, Stamp: now}
	if allowed == 0 {
		r.outcome.RetryAfter = time.Duration(wait) * time.Microsecond
	}
	return r, nil
}

// close ends every lease, giving back what they hold, reports the
// decisions not reported yet, and waits for the give-backs; decisions
// after it are one call each, and a lease whose call was in flight is
// given back when the call returns.
func (l *leaser) close() {
	l.closed.Store(true)
	now := mono()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			e.mu.Lock()
			l.end(e, now, core.LeaseReturned)
			if e.timer != nil {
				e.timer.Stop()
			}
			rep := served{e.item.Budget, e.servedLocal, e.servedStore}
			e.servedLocal, e.servedStore = 0, 0
			e.mu.Unlock()
			l.report(rep)
		}
		sh.mu.RUnlock()
	}
	l.wg.Wait()
}

// held returns the units the store's leases hold now.
func (l *leaser) held() int64 {
	var n int64
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			e.mu.Lock()
			n += e.units
			e.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
	return n
}

// LeaseStats counts what a Store's leases did since it was created.
type LeaseStats struct {
	// Taken is how many leases the store took, TakenUnits the units they
	// held beyond the costs of the requests that took them.
	Taken, TakenUnits int64
	// Returned and ReturnedUnits count leases that ended early (their
	// window ended, the store closed, a new lease replaced them) and the
	// unspent units they gave back.
	Returned, ReturnedUnits int64
	// Expired and ExpiredUnits count leases that reached their TTL with
	// units unspent, and those units, given back.
	Expired, ExpiredUnits int64
	// StrandedUnits is units leases charged that nobody spent and that
	// could not be given back (a fixed window that had ended, an error).
	StrandedUnits int64
	// ServedLocal is how many decisions of leased budgets the store
	// answered from its leases or from a recent denial, with no Redis
	// call; ServedStore how many it sent to Redis.
	ServedLocal, ServedStore int64
	// Held is the units the store's leases hold now.
	Held int64
}

// LeaseStats returns what the store's leases did so far.
func (s *Store) LeaseStats() LeaseStats {
	l := s.leases
	return LeaseStats{
		Taken: l.taken.Load(), TakenUnits: l.takenUnits.Load(),
		Returned: l.returned.Load(), ReturnedUnits: l.returnedUnits.Load(),
		Expired: l.expired.Load(), ExpiredUnits: l.expiredUnits.Load(),
		StrandedUnits: l.stranded.Load(),
		ServedLocal:   l.local.Load(), ServedStore: l.remote.Load(),
		Held: l.held(),
	}
}

// Close ends the store's leases, giving back the units they hold (see the
// package documentation, Leases), and waits until that is done or has
// failed; then it stops watching the Sentinels of [Config.Sentinel] and
// waits for its goroutines to end. A Store that leases nothing and
// watches no Sentinel needs no Close. Takes after Close still work, one
// call each, as for budgets without leasing, and no longer refuse during
// a failover. Close does not close the client.
func (s *Store) Close() error {
	s.leases.close()
	if s.watch != nil {
		s.watch.close()
	}
	return nil
}
