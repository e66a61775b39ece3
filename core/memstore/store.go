// Package memstore is the in-memory [core.Store]: state kept in this
// process, for one instance, or as the engine's fallback while a shared
// store is away (core.FailLocal).
//
//	store, err := memstore.New(memstore.Config{})
//	eng, err := core.New(core.Config{Store: store, Budgets: budgets})
//
// It runs the algorithms' one Go definition, which the Redis store's
// scripts mirror, and passes the store kit (core/storetest). Memory is
// bounded: idle keys are swept every SweepInterval, and MaxEntries caps
// the keys held (see [Config]).
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/algorithm"
)

// Config configures a [Store]. The zero value is usable.
type Config struct {
	// Clock is the store's time source. Default: a [core.SystemClock].
	Clock core.Clock
	// MaxEntries caps the number of keys held, all budgets together.
	// Default 1,048,576.
	//
	// The cap is enforced per shard (MaxEntries/Shards each, rounded up).
	// When a shard is full, a new key first takes the place of expired
	// entries (swept at most once a second per shard), then evicts one
	// entry, chosen so that a flood of new keys in one budget cannot take
	// the counters of another:
	//
	//   - The evicting budget is the new key's own budget when that budget
	//     already holds its share of the shard (the shard's cap divided by
	//     the number of budgets with entries in it); otherwise it is the
	//     budget holding the most entries of the shard, which is above its
	//     share. A budget holding fewer entries than its share therefore
	//     never loses a live entry to another budget's new keys, whatever
	//     their windows. With the defaults a shard holds 4,096 entries, so
	//     with 8 budgets present, a budget keeps up to 511 keys per shard
	//     (about 130,000 in all) safe from other budgets' floods.
	//   - Within the evicting budget, the store looks at a sample of its
	//     entries and removes the one that gives away the least: an entry
	//     whose window has passed or that holds nothing spent costs nothing
	//     to drop (and is not counted as an eviction); otherwise the entry
	//     with the fewest units still counting, the one expiring soonest
	//     among equals.
	//
	// What a flooded budget itself can lose: a key evicted from it starts
	// afresh, so it may be granted again, within its window, what it had
	// spent. Keys that spent little (one request, as every key of a flood
	// of new keys has) go first; a key that has spent more than the flood's
	// keys is evicted only when no sampled entry spent less. A flood of new
	// keys in a budget can therefore cost that budget's light users their
	// counts, never another budget's.
	//
	// A take never evicts an entry it has itself charged, so a shard can
	// exceed its share by the entries of one take (at most the number of
	// its items). An entry holding core.Concurrency slots is never evicted
	// either (its requests would give their slots back to a fresh count):
	// a shard can also exceed its cap by those, at most one per request in
	// flight. Evictions are counted per budget (see
	// [Store.Evictions], [Store.BudgetEvictions]) and reported
	// to Observer.
	MaxEntries int
	// Shards is the number of independently locked partitions, a power of
	// two. Default 256.
	Shards int
	// SweepInterval is how often a background goroutine removes expired
	// entries. Default one minute; negative disables the sweeper (expired
	// entries are then only replaced or evicted). Call Close to stop it.
	SweepInterval time.Duration
	// Observer, when it implements [EvictionObserver], is told of every
	// live entry evicted because a shard was full, after the store's locks
	// are released. Pass the engine's observer (observe.Multi of a
	// observe.Logger and a metrics.Metrics, for example): both count and
	// log evictions. Optional; other observers are ignored.
	Observer core.Observer
}

// EvictionObserver is [core.EvictionObserver].
//
// Deprecated: use core.EvictionObserver; this name is kept for a release.
type EvictionObserver = core.EvictionObserver

// Store is a [core.Store] that keeps state in this process. It is safe for
// concurrent use; requests on different keys rarely share a lock, and a
// decision on a key that already exists does not allocate.
//
// A key's hash picks its shard; each shard keeps one hash table per
// budget, keyed by the partition key alone. An entry is 64 bytes, one
// cache line. A single-item take of a fixed window (quota below 2^31,
// window longer than about 0.41 s) or a bucket charges it with one
// compare-and-swap, without a lock; everything else locks the entry:
// multi-item takes, refunds, sweeps and evictions, limit changes, the
// sliding window and log, concurrency slots. A single-item take of an
// existing key finds its entry without the shard's lock, so that takes
// over many keys on several cores do not pass the shard's lock between
// them; one in 64 (at random) looks under the lock, where a key found
// twice in a row becomes its shard's hot key, which a take finds without
// the table, and the hot key found last is found without hashing it, so
// parallel takes on one key contend on that entry's line alone. The
// set of budget names is expected to be the configuration's: every name
// ever used stays registered (a few words per shard) for the store's
// life.
type Store struct {
	clock       core.Clock
	shards      []memShard
	mask        uint64
	seed        maphash.Seed
	maxPerShard int
	evictions   atomic.Uint64
	observer    EvictionObserver

	budgets atomic.Pointer[memRegistry] // copy on write
	regMu   sync.Mutex                  // serialises registering budgets

	// top is the entry that became a shard's hot entry last: a take on
	// its key finds it without hashing the key. topMu serialises its
	// writers, which hold a shard's lock.
	top   memHot
	topMu sync.Mutex

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// memRegistry is the budgets the store has seen, by name and by index.
type memRegistry struct {
	byName map[string]*memBudget
	byID   []*memBudget
}

// memBudget is a budget name the store has seen, and its index in every
// shard's tables.
type memBudget struct {
	name string
	id   int
	// evictions is written under a flood while name and id are read by
	// every take: a line of its own.
	_         [64 - 16 - 8]byte
	evictions atomic.Uint64
}

// evictionSample is how many entries of the evicting budget an eviction
// looks at.
const evictionSample = 8

// lockedEvery is how many single-item takes of an existing key there are
// for one that looks its entry up under the shard's lock (take1): the
// lock finds hot keys, at the price of a write to the shard's line.
const lockedEvery = 64

// maxStackItems is how many items a Take handles without allocating.
const maxStackItems = 16

// memShard is two cache lines. The first holds the shard's hot entry and
// who it belongs to, and the tables' view, which a take reads before it
// locks anything, written only when the hot entry changes or a budget's
// table is added, so takes on other cores keep the line in their caches;
// the second holds the lock and what it guards. A take on a hot key
// therefore moves one line between cores, its entry's, and so do most
// takes on any other existing key: it reads the first line from its own
// cache and finds its entry through the view, without the lock.
type memShard struct {
	hot memHot
	// view is tables, for takes that look an entry up without the lock:
	// published when a table is added.
	view atomic.Pointer[[]*memTable]
	_    [64 - unsafe.Sizeof(memHot{}) - 8]byte

	mu     sync.Mutex
	prev   atomic.Pointer[memEntry] // written under mu, read without it
	n      int                      // entries in all tables
	tables []*memTable              // by memBudget.id; nil for none
	swept  int64                    // µs; when the shard was last swept because it was full
	_      [8]byte                  // the second line's rest
}

// memHot is a hot entry, a shard's or the store's top one: the entry a
// take on its key finds without the shard's lock, and a copy of the
// entry's key and budget, so that the take checks them without reading the
// entry's line, which takes on other cores keep writing. The fields are
// written under a lock (the shard's, or Store.topMu) and read
// without it, guarded by seq as a sequence lock: odd while they change,
// and moved on by each change. h, the key's hash, lets a shard's takes
// skip the comparison for other keys; the top entry leaves it 0.
//
// An entry becomes hot when two takes in a row of the shard's locked path
// find it (memShard.prev holds the first), so takes over many keys never
// write it.
type memHot struct {
	seq atomic.Uint64
	h   atomic.Uint64
	e   atomic.Pointer[memEntry]
	kp  atomic.Pointer[byte]
	kn  atomic.Uint64 // the key's length << 32 | the budget's id
}

// set makes e, whose key hashes to h, the hot entry, or clears it when e
// is nil. The caller holds the lock that guards m.
func (m *memHot) set(e *memEntry, h uint64) {
	m.seq.Add(1)
	m.e.Store(e)
	if e != nil {
		m.h.Store(h)
		m.kp.Store(e.kp)
		m.kn.Store(uint64(e.kn)<<32 | uint64(e.bid))
	} else {
		m.h.Store(0)
		m.kp.Store(nil)
		m.kn.Store(0)
	}
	m.seq.Add(1)
}

// hotEntry returns m's entry when it is the entry of (budget, key), or
// nil. It takes no lock and does not read the entry, which may be dead by
// the time the caller holds its lock.
func (s *Store) hotEntry(m *memHot, budget, key string) *memEntry {
	v := m.seq.Load()
	if v&1 != 0 {
		return nil
	}
	e, kp, kn := m.e.Load(), m.kp.Load(), m.kn.Load()
	if m.seq.Load() != v || e == nil || uint64(len(key)) != kn>>32 {
		return nil // changed while read, empty, or another key
	}
	if unsafe.String(kp, len(key)) != key || s.budgets.Load().byID[uint32(kn)].name != budget {
		return nil
	}
	return e
}

// used records that the slow path of sh found e, whose key hashes to h,
// making it the shard's hot entry, and the store's top one, the second
// time in a row. The caller holds sh.mu.
func (s *Store) used(sh *memShard, h uint64, e *memEntry) {
	if sh.prev.Load() != e {
		sh.prev.Store(e)
		return
	}
	if sh.hot.e.Load() != e {
		sh.hot.set(e, h)
		s.topMu.Lock()
		s.top.set(e, 0)
		s.topMu.Unlock()
	}
}

// table returns b's table in sh, or nil. The caller holds sh.mu.
func (sh *memShard) table(b *memBudget) *memTable {
	if b.id < len(sh.tables) {
		if t := sh.tables[b.id]; t != nil && t.slots != nil {
			return t
		}
	}
	return nil
}

// lookup returns the entry of (b, key), whose hash is h, or nil, without
// sh's lock: it may miss an entry a concurrent change is moving, and
// what it returns may have been removed since (memTable says why that
// is safe).
func (sh *memShard) lookup(b *memBudget, h uint64, key string) *memEntry {
	tables := sh.view.Load()
	if tables == nil || b.id >= len(*tables) {
		return nil
	}
	t := (*tables)[b.id]
	if t == nil {
		return nil
	}
	if slots := t.view.Load(); slots != nil {
		return lookupIn(*slots, h, key)
	}
	return nil
}

// makeTable returns b's table in sh, creating it. The caller holds sh.mu.
// A table is added to a copy of sh.tables, which is then published: the
// slice that lookups without the lock read is never written.
func (sh *memShard) makeTable(b *memBudget) *memTable {
	if b.id < len(sh.tables) && sh.tables[b.id] != nil {
		return sh.tables[b.id]
	}
	tables := make([]*memTable, max(len(sh.tables), b.id+1))
	copy(tables, sh.tables)
	t := new(memTable)
	tables[b.id] = t
	sh.tables = tables
	view := new([]*memTable)
	*view = tables
	sh.view.Store(view)
	return t
}

// find returns the entry of (b, key), whose hash is h, or nil. The caller
// holds sh.mu.
func (sh *memShard) find(b *memBudget, h uint64, key string) *memEntry {
	if t := sh.table(b); t != nil {
		return t.lookup(h, key)
	}
	return nil
}

// removeAt deletes the entry in slot i of t, a table of sh, marking it
// dead. The caller holds sh.mu and e's lock.
func (s *Store) removeAt(sh *memShard, t *memTable, i int, e *memEntry) {
	e.kill()
	if sh.hot.e.Load() == e {
		sh.hot.set(nil, 0)
	}
	if s.top.e.Load() == e {
		s.topMu.Lock()
		if s.top.e.Load() == e {
			s.top.set(nil, 0)
		}
		s.topMu.Unlock()
	}
	if sh.prev.Load() == e {
		sh.prev.Store(nil)
	}
	t.delete(i)
	sh.n--
}

// sweep removes sh's expired entries, except those in keep, and returns how
// many. The caller holds sh.mu.
func (s *Store) sweep(sh *memShard, now int64, keep []*memEntry) int {
	n := 0
	for _, t := range sh.tables {
		if t == nil {
			continue
		}
		for i := 0; i < len(t.slots); {
			e := t.slots[i].e.Load()
			if e == nil || slices.Contains(keep, e) {
				i++
				continue
			}
			if st, lim := e.view(); expiresOf(st, lim) > now {
				i++
				continue
			}
			e.lock()
			if e.expires() > now { // charged since
				e.unlock()
				i++
				continue
			}
			// Removing shifts a later entry into slot i: look at it again.
			s.removeAt(sh, t, i, e)
			e.unlock()
			n++
		}
		t.shrink()
	}
	return n
}

// capSweepEvery is how often a full shard is swept of expired entries
// before it evicts a live one (µs).
const capSweepEvery = 1_000_000

var _ core.Store = (*Store)(nil)

// New returns a memory store configured by cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Clock == nil {
		cfg.Clock = core.NewSystemClock()
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 1 << 20
	}
	if cfg.Shards == 0 {
		cfg.Shards = 256
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Minute
	}
	var problems []error
	if cfg.MaxEntries < 0 {
		problems = append(problems, fmt.Errorf("memory store: max entries %d is negative", cfg.MaxEntries))
	}
	if cfg.Shards < 0 || cfg.Shards&(cfg.Shards-1) != 0 {
		problems = append(problems, fmt.Errorf("memory store: shards %d is not a power of two", cfg.Shards))
	}
	if len(problems) > 0 {
		err := &core.ConfigError{Problems: problems}
		return nil, err
	}
	s := &Store{
		clock:       cfg.Clock,
		shards:      make([]memShard, cfg.Shards),
		mask:        uint64(cfg.Shards - 1),
		seed:        maphash.MakeSeed(),
		maxPerShard: (cfg.MaxEntries + cfg.Shards - 1) / cfg.Shards,
	}
	s.observer, _ = cfg.Observer.(EvictionObserver)
	s.budgets.Store(&memRegistry{byName: map[string]*memBudget{}})
	if cfg.SweepInterval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.sweeper(cfg.SweepInterval)
	}
	return s, nil
}

// MustNew is New for configurations known to be valid;
// it panics on error.
func MustNew(cfg Config) *Store {
	s, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return s
}

// hash is a key's hash: its low bits pick the shard, its high bits the
// slot in the shard's table.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *Store) shardOf(h uint64) *memShard { return &s.shards[h&s.mask] }

// budget returns the registered budget called name, or nil.
func (s *Store) budget(name string) *memBudget {
	return s.budgets.Load().byName[name]
}

// register returns the registered budget called name, registering it.
func (s *Store) register(name string) *memBudget {
	if b := s.budget(name); b != nil {
		return b
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := s.budgets.Load()
	if b := old.byName[name]; b != nil {
		return b
	}
	next := &memRegistry{byName: make(map[string]*memBudget, len(old.byID)+1)}
	for k, v := range old.byName {
		next.byName[k] = v
	}
	b := &memBudget{name: name, id: len(old.byID)}
	next.byName[name] = b
	next.byID = append(slices.Clip(old.byID), b)
	s.budgets.Store(next)
	return b
}

// Take implements [core.Store].
func (s *Store) Take(_ context.Context, items []core.Item, out []core.Outcome) error {
	if len(out) < len(items) {
		return errors.New("memory store: take: fewer outcomes than items")
	}
	for i := range items {
		if err := items[i].Validate(); err != nil {
			return fmt.Errorf("memory store: take: %w", err)
		}
		if uint64(len(items[i].Key)) > maxMemKey {
			return fmt.Errorf("memory store: take: budget %q: a key of %d bytes is longer than %d", items[i].Budget, len(items[i].Key), uint64(maxMemKey))
		}
	}
	// The clock is read once the state to evaluate is held (see
	// memEntry.tryCharge), not here.
	if len(items) == 1 {
		if evicted := s.take1(&items[0], &out[0]); evicted != nil {
			s.report(evicted)
		}
		return nil
	}
	return s.takeMany(items, out)
}

// takeMany is Take for several items (or none), validated: it locks their
// shards and their entries, in order.
func (s *Store) takeMany(items []core.Item, out []core.Outcome) error {
	if err := core.CheckDistinct(items); err != nil {
		return fmt.Errorf("memory store: take: %w", err)
	}
	var hashBuf [maxStackItems]uint64
	var idxBuf [maxStackItems]int
	var nextBuf [maxStackItems]algorithm.State
	var entBuf [maxStackItems]*memEntry
	hs, idx, nexts, ents := hashBuf[:0], idxBuf[:0], nextBuf[:0], entBuf[:0]
	if len(items) > maxStackItems {
		hs, idx = make([]uint64, 0, len(items)), make([]int, 0, len(items))
		nexts, ents = make([]algorithm.State, 0, len(items)), make([]*memEntry, 0, len(items))
	}
	for i := range items {
		h := s.hash(items[i].Key)
		hs, idx = append(hs, h), append(idx, int(h&s.mask))
	}
	var orderBuf [maxStackItems]int
	locked := s.lockAll(idx, orderBuf[:0])
	evicted := s.takeN(items, out, hs, nexts, ents)
	s.unlockAll(locked)
	for _, b := range evicted {
		s.report(b)
	}
	return nil
}

// takeN is Take for several items, under the locks of their shards. It
// returns the budgets of the entries it evicted (allocated only then).
func (s *Store) takeN(items []core.Item, out []core.Outcome, hs []uint64, nexts []algorithm.State, ents []*memEntry) (evicted []*memBudget) {
	reg := s.budgets.Load()
	// Every entry found is locked until the end, so no hot-key take
	// changes it between the evaluation and the charge.
	defer func() {
		for _, e := range ents {
			if e != nil {
				e.unlock()
			}
		}
	}()
	for i := range items {
		it := &items[i]
		var e *memEntry
		if b := reg.byName[it.Budget]; b != nil {
			e = s.shardOf(hs[i]).find(b, hs[i], it.Key)
		}
		if e != nil {
			e.lock()
		}
		ents = append(ents, e)
	}
	// Read with every entry locked: see memEntry.tryCharge.
	now := nowMicros(s.clock)
	allowed := true
	for i := range items {
		it := &items[i]
		var st algorithm.State
		if e := ents[i]; e != nil && e.matches(&it.Limit) {
			st = e.state()
		}
		nexts = append(nexts, algorithm.Eval(&st, &it.Limit, it.Cost, now, &out[i]))
		if !out[i].Allowed && !it.Shadow {
			allowed = false
		}
	}
	if !allowed {
		// Nothing is charged: describe every allowed item by its current
		// state, as a cost-0 evaluation sees it.
		for i := range items {
			if out[i].Allowed {
				it := &items[i]
				var st algorithm.State
				if e := ents[i]; e != nil && e.matches(&it.Limit) {
					st = e.state()
				}
				out[i] = algorithm.Uncharged(&st, &it.Limit, now)
			}
		}
		return evicted
	}
	// Charge, reusing the entries found above. ents also lists every entry
	// this take touches, so making room for a new one never evicts them (a
	// charge would be lost).
	for i := range items {
		if !out[i].Allowed {
			continue
		}
		it := &items[i]
		e := ents[i]
		if e == nil {
			var ev *memBudget
			e, ev = s.insert(s.shardOf(hs[i]), s.register(it.Budget), hs[i], it, now, ents)
			e.lock()
			ents[i] = e
			if ev != nil {
				evicted = append(evicted, ev)
			}
		}
		var st algorithm.State
		if e.matches(&it.Limit) {
			st = e.state()
		}
		algorithm.Commit(&st, nexts[i], &it.Limit, it.Cost, now)
		e.setState(st, &it.Limit)
		out[i].Charged = true
	}
	return evicted
}

// report tells the observer of an eviction from b.
func (s *Store) report(b *memBudget) {
	if s.observer != nil {
		s.observer.ObserveEviction(b.name)
	}
}

// take1 is Take for a single item. It returns the budget of the entry it
// evicted to make room, or nil.
func (s *Store) take1(it *core.Item, o *core.Outcome) (evicted *memBudget) {
	// A hot key's entry, found without hashing the key (the store's top
	// entry) or without the shard's lock: a dead one sends the take on to
	// look again.
	if e := s.hotEntry(&s.top, it.Budget, it.Key); e != nil && e.chargeLive(it, o, s.clock) {
		return nil
	}
	h := s.hash(it.Key)
	sh := s.shardOf(h)
	if sh.hot.h.Load() == h {
		if e := s.hotEntry(&sh.hot, it.Budget, it.Key); e != nil && e.chargeLive(it, o, s.clock) {
			return nil
		}
	}
	// An existing entry, looked up without the shard's lock, so that
	// takes over many keys write no shard's line. One take in lockedEvery
	// (at random), and every take of the entry the shard's locked path
	// found last, look under the lock instead, where a key found there
	// twice in a row becomes hot (used).
	b := s.budget(it.Budget) // registered budgets stay registered
	if b != nil && rand.Uint32()%lockedEvery != 0 {
		if e := sh.lookup(b, h, it.Key); e != nil && e != sh.prev.Load() && e.chargeLive(it, o, s.clock) {
			return nil
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b == nil { // registered meanwhile, with the key's entry, perhaps
		b = s.budget(it.Budget)
	}
	var e *memEntry
	if b != nil {
		e = sh.find(b, h, it.Key)
	}
	if e == nil {
		// No other take can add the key, or reach the new entry, while
		// the shard's lock is held: one clock read serves both steps.
		now := nowMicros(s.clock)
		var st algorithm.State
		algorithm.Eval(&st, &it.Limit, it.Cost, now, o)
		if !o.Allowed {
			return nil
		}
		e, evicted = s.insert(sh, s.register(it.Budget), h, it, now, nil)
		e.lock()
		e.charge(it, o, now)
		e.unlock()
	} else {
		e.chargeLive(it, o, s.clock) // live: the shard's lock is held
	}
	s.used(sh, h, e)
	return evicted
}

// insert adds a new entry for it, of budget b, whose key hashes to h, to
// sh, making room when sh is full (never by dropping one of keep). It
// returns the entry and the budget of a live entry evicted for it, if any.
// The caller holds sh.mu and knows (b, it.Key) has no entry.
func (s *Store) insert(sh *memShard, b *memBudget, h uint64, it *core.Item, now int64, keep []*memEntry) (*memEntry, *memBudget) {
	var evicted *memBudget
	if sh.n >= s.maxPerShard && now-sh.swept >= capSweepEvery {
		// At the cap: first drop every expired entry of the shard (at most
		// once a second per shard, so a flood of new keys does not scan
		// on every request).
		sh.swept = now
		s.sweep(sh, now, keep)
	}
	if sh.n >= s.maxPerShard {
		evicted = s.evict(sh, b, h, now, keep)
	}
	e := newMemEntry(it.Key, b, &it.Limit)
	sh.makeTable(b).insert(h, e)
	sh.n++
	return e, evicted
}

// evict removes one entry of sh to make room for a new key of budget b,
// whose hash h seeds the sample, as [Config].MaxEntries describes,
// and returns the evicted entry's budget when the entry was live (nil when
// it was free, or when every candidate is in keep).
func (s *Store) evict(sh *memShard, b *memBudget, h uint64, now int64, keep []*memEntry) *memBudget {
	// The evicting budget: b itself when it holds its share, otherwise the
	// largest (which then holds more than its share).
	own, present := 0, 0
	largest, most := -1, 0
	for i, t := range sh.tables {
		if t == nil {
			continue
		}
		n := t.n
		if n == 0 {
			continue
		}
		present++
		if i == b.id {
			own = n
		}
		if n > most {
			largest, most = i, n
		}
	}
	if own == 0 {
		present++
	}
	share := max(1, s.maxPerShard/present)
	target := largest
	if own >= share {
		target = b.id
	}
	if removed, victim := s.evictFrom(sh, target, h, now, keep); removed || target == largest {
		return victim
	}
	// b's own entries are all in keep: take from the largest instead.
	_, victim := s.evictFrom(sh, largest, h, now, keep)
	return victim
}

// evictFrom removes the entry of table id in sh that gives away the least
// among a sample (the first entries from a slot picked by h), skipping
// keep. It reports whether it removed one, and returns the table's budget
// when that entry was live (an eviction).
func (s *Store) evictFrom(sh *memShard, id int, h uint64, now int64, keep []*memEntry) (removed bool, live *memBudget) {
	t := sh.tables[id]
	if t == nil || len(t.slots) == 0 {
		return false, nil
	}
	mask := len(t.slots) - 1
	victim := -1
	var least, soonest int64
	n := 0
	for k, i := 0, t.home(h); k < len(t.slots) && n < evictionSample; k, i = k+1, (i+1)&mask {
		e := t.slots[i].e.Load()
		if e == nil || slices.Contains(keep, e) {
			continue
		}
		st, lim := e.view()
		if core.Algorithm(lim&7) == core.Concurrency && st.A > 0 {
			// It holds slots, never evicted: the requests holding them
			// would give them back to a fresh entry, and its count would
			// go wrong. There are never more of them than requests in
			// flight.
			continue
		}
		owed, expires := owedOf(st, lim, now), expiresOf(st, lim)
		if owed == 0 {
			e.lock()
			if e.owed(now) == 0 { // a state holding slots owes them
				s.removeAt(sh, t, i, e) // free: nothing is given away
				e.unlock()
				return true, nil
			}
			e.unlock() // charged since it was looked at
			continue
		}
		if victim < 0 || owed < least || owed == least && expires < soonest {
			victim, least, soonest = i, owed, expires
		}
		n++
	}
	if victim < 0 {
		return false, nil
	}
	e := t.slots[victim].e.Load()
	e.lock()
	s.removeAt(sh, t, victim, e)
	e.unlock()
	b := s.budgets.Load().byID[id]
	b.evictions.Add(1)
	s.evictions.Add(1)
	return true, b
}

// lockAll locks each distinct shard of idx once, in ascending order, so
// concurrent multi-item takes cannot deadlock. It returns the locked shards,
// appended to order.
func (s *Store) lockAll(idx, order []int) []int {
	for _, i := range idx {
		order = insertUnique(order, i)
	}
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	return order
}

func insertUnique(sorted []int, v int) []int {
	pos := len(sorted)
	for j, x := range sorted {
		if x == v {
			return sorted
		}
		if x > v {
			pos = j
			break
		}
	}
	sorted = append(sorted, 0)
	copy(sorted[pos+1:], sorted[pos:])
	sorted[pos] = v
	return sorted
}

func (s *Store) unlockAll(order []int) {
	for j := len(order) - 1; j >= 0; j-- {
		s.shards[order[j]].mu.Unlock()
	}
}

// Refund implements [core.Store].
func (s *Store) Refund(_ context.Context, items []core.Item, outcomes []core.Outcome) error {
	if len(outcomes) < len(items) {
		return errors.New("memory store: refund: fewer outcomes than items")
	}
	for i := range items {
		it, o := &items[i], &outcomes[i]
		if !o.Charged || it.Cost == 0 {
			continue
		}
		b := s.budget(it.Budget)
		if b == nil {
			continue
		}
		h := s.hash(it.Key)
		sh := s.shardOf(h)
		sh.mu.Lock()
		if e := sh.find(b, h, it.Key); e != nil {
			e.lock()
			if e.matches(&it.Limit) {
				st := e.state()
				// Read with e locked: see memEntry.tryCharge.
				algorithm.Refund(&st, &it.Limit, it.Cost, o, nowMicros(s.clock))
				e.setState(st, &it.Limit)
			}
			e.unlock()
		}
		sh.mu.Unlock()
	}
	return nil
}

// Len returns the number of keys held, all budgets together, expired ones
// included until swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many live entries have been evicted because their
// shard was full, all budgets together. Expired entries and entries
// holding nothing spent are dropped without being counted.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// BudgetEvictions returns how many live entries of the named budget have
// been evicted because their shard was full; 0 for a budget the store has
// never held.
func (s *Store) BudgetEvictions(budget string) uint64 {
	if b := s.budget(budget); b != nil {
		return b.evictions.Load()
	}
	return 0
}

// Sweep removes every expired entry now and returns how many it removed.
func (s *Store) Sweep() int {
	now := nowMicros(s.clock)
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		removed += s.sweep(sh, now, nil)
		sh.mu.Unlock()
	}
	return removed
}

func (s *Store) sweeper(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Close stops the background sweeper. The store stays usable.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}

// Peek implements [core.Peeker]: it evaluates items at cost 0 under the
// shards' locks with the same definitions a take uses, and creates or
// changes no entry (a sliding log drops the entries that have left its
// window, as every evaluation does; that does not change what it means).
func (s *Store) Peek(_ context.Context, items []core.Item, out []core.Outcome) error {
	if len(out) < len(items) {
		return errors.New("memory store: peek: fewer outcomes than items")
	}
	for i := range items {
		it := items[i]
		it.Cost = 0
		if err := it.Validate(); err != nil {
			return fmt.Errorf("memory store: peek: %w", err)
		}
	}
	if err := core.CheckDistinct(items); err != nil {
		return fmt.Errorf("memory store: peek: %w", err)
	}
	s.peek(items, out)
	return nil
}

// peek evaluates items at cost 0 and writes their outcomes to out,
// changing nothing: a missing entry, or one of another algorithm or
// window, reads as an empty state, as Take treats it. (A sliding log drops
// the entries that have left its window, as every evaluation does; that
// does not change what it means.)
func (s *Store) peek(items []core.Item, out []core.Outcome) {
	now := nowMicros(s.clock)
	for i := range items {
		it := &items[i]
		var st algorithm.State
		b := s.budget(it.Budget)
		if b == nil { // the store has never seen the budget
			out[i] = algorithm.Uncharged(&st, &it.Limit, now)
			continue
		}
		h := s.hash(it.Key)
		sh := s.shardOf(h)
		sh.mu.Lock() // a sliding log's evaluation drops old entries
		e := sh.find(b, h, it.Key)
		if e != nil {
			e.lock()
			if e.matches(&it.Limit) {
				st = e.state()
			}
		}
		out[i] = algorithm.Uncharged(&st, &it.Limit, now)
		if e != nil {
			e.unlock()
		}
		sh.mu.Unlock()
	}
}

// nowMicros returns c's time in Unix microseconds, avoiding the
// time.Time round trip for the system clock.
func nowMicros(c core.Clock) int64 {
	if sc, ok := c.(*core.SystemClock); ok {
		return sc.UnixMicro()
	}
	return c.Now().UnixMicro()
}
