package core

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryConfig configures a [MemoryStore]. The zero value is usable.
type MemoryConfig struct {
	// Clock is the store's time source. Default: a [SystemClock].
	Clock Clock
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
	// its items). An entry holding Concurrency slots is never evicted
	// either (its requests would give their slots back to a fresh count):
	// a shard can also exceed its cap by those, at most one per request in
	// flight. Evictions are counted per budget (see
	// [MemoryStore.Evictions], [MemoryStore.BudgetEvictions]) and reported
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
	Observer Observer
}

// EvictionObserver is an optional interface of an [Observer]: a
// [MemoryStore] configured with an observer that implements it calls
// ObserveEviction once per live entry it evicts because it was full, with
// the evicted entry's budget. Expired entries and entries holding nothing
// spent are dropped without a call: they cost their key nothing. It is
// called on the request's goroutine, with no store lock held; keep it
// quick, and expect floods of calls while the store is full.
type EvictionObserver interface {
	ObserveEviction(budget string)
}

// MemoryStore is a [Store] that keeps state in this process. It is safe for
// concurrent use; requests on different keys rarely share a lock, and a
// decision on a key that already exists does not allocate.
//
// Each shard keeps one table per budget, keyed by the partition key alone.
// The set of budget names is expected to be the configuration's: every
// name ever used stays registered (a few words per shard) for the store's
// life.
type MemoryStore struct {
	clock       Clock
	shards      []memShard
	mask        uint64
	seed        maphash.Seed
	maxPerShard int
	evictions   atomic.Uint64
	observer    EvictionObserver

	budgets atomic.Pointer[memRegistry] // copy on write
	regMu   sync.Mutex                  // serialises registering budgets

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

// maxStackItems is how many items a Take handles without allocating.
const maxStackItems = 16

// memEntry is one key's state in one budget: 48 bytes.
type memEntry struct {
	st      state
	expires int64 // µs; from then on st is equivalent to an empty state
	lim     int64 // packLimit of the algorithm and window st was built under
}

// packLimit packs what an entry's state depends on: the window and the
// algorithm. A window is a whole number of milliseconds (checkItem), so
// its low 6 bits in nanoseconds are zero and hold the algorithm.
// A Concurrency state (slots held) does not depend on the window (the
// lease), so a changed lease keeps the slots held.
func packLimit(l *Limit) int64 {
	if l.Algorithm == Concurrency {
		return int64(Concurrency)
	}
	return int64(l.Window) | int64(l.Algorithm)
}

func (e *memEntry) matches(l *Limit) bool { return e.lim == packLimit(l) }

func (e *memEntry) reset(l *Limit) { *e = memEntry{lim: packLimit(l)} }

// owed is how much the entry's key would be given back if the entry were
// dropped at now: 0 for an entry equivalent to an empty state, otherwise
// a measure that grows with the units still counting (units for window
// algorithms, µs of bucket debt for buckets), comparable between entries
// of one budget.
func (e *memEntry) owed(now int64) int64 {
	if e.expires <= now {
		return 0
	}
	switch Algorithm(e.lim & 63) {
	case FixedWindow:
		return e.st.b
	case SlidingWindow:
		return e.st.b + e.st.c
	case TokenBucket, LeakyBucket:
		return max(0, e.st.a-now)
	case SlidingLog:
		if g := e.st.log; g != nil {
			return g.sum
		}
	case Concurrency:
		return e.st.a
	}
	return 0
}

// holds reports whether e holds concurrency slots, which are never evicted:
// the requests holding them would give them back to a fresh entry, and
// its count would go wrong. There are never more of them than requests in
// flight.
func (e *memEntry) holds() bool {
	return Algorithm(e.lim&63) == Concurrency && e.st.a > 0
}

// memTable is one budget's entries in one shard.
type memTable struct {
	m map[string]*memEntry
}

// memShard is padded to two cache lines so that neighbouring shards' locks
// do not share one; what a hot key's take reads is in the first line.
type memShard struct {
	mu sync.Mutex
	// last is the entry used most recently, of lastKey in lastB, so a
	// hot key skips the registry and the map, and a key of the same
	// budget skips the registry.
	last       *memEntry
	lastKey    string
	lastBudget string // lastB.name, compared without loading lastB
	lastB      *memBudget
	n          int        // entries in all tables
	tables     []memTable // by memBudget.id
	swept      int64      // µs; when the shard was last swept because it was full
	_          [128 - 8 - 8 - 16 - 16 - 8 - 8 - 24 - 8]byte
}

// table returns b's table in sh, or nil. The caller holds sh.mu.
func (sh *memShard) table(b *memBudget) *memTable {
	if b.id < len(sh.tables) {
		if t := &sh.tables[b.id]; t.m != nil {
			return t
		}
	}
	return nil
}

// makeTable returns b's table in sh, creating it. The caller holds sh.mu.
func (sh *memShard) makeTable(b *memBudget) *memTable {
	if b.id >= len(sh.tables) {
		sh.tables = append(sh.tables, make([]memTable, b.id+1-len(sh.tables))...)
	}
	t := &sh.tables[b.id]
	if t.m == nil {
		t.m = make(map[string]*memEntry)
	}
	return t
}

// get returns the entry of (b, key), or nil. The caller holds sh.mu.
func (sh *memShard) get(b *memBudget, key string) *memEntry {
	if sh.last != nil && sh.lastKey == key && sh.lastBudget == b.name {
		return sh.last
	}
	return sh.find(b, key)
}

// find is get without the look at the last entry used.
func (sh *memShard) find(b *memBudget, key string) *memEntry {
	t := sh.table(b)
	if t == nil {
		return nil
	}
	e := t.m[key]
	if e != nil {
		sh.last, sh.lastKey, sh.lastBudget, sh.lastB = e, key, b.name, b
	}
	return e
}

// remove deletes key from t, a table of sh. The caller holds sh.mu.
func (sh *memShard) remove(t *memTable, key string, e *memEntry) {
	if sh.last == e {
		sh.last, sh.lastKey, sh.lastBudget, sh.lastB = nil, "", "", nil
	}
	delete(t.m, key)
	sh.n--
}

// sweep removes sh's expired entries, except those in keep, and returns how
// many. The caller holds sh.mu.
func (sh *memShard) sweep(now int64, keep []*memEntry) int {
	n := 0
	for i := range sh.tables {
		t := &sh.tables[i]
		for k, e := range t.m {
			if e.expires <= now && !slices.Contains(keep, e) {
				sh.remove(t, k, e)
				n++
			}
		}
	}
	return n
}

// capSweepEvery is how often a full shard is swept of expired entries
// before it evicts a live one (µs).
const capSweepEvery = 1_000_000

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns a memory store configured by cfg.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	if cfg.Clock == nil {
		cfg.Clock = NewSystemClock()
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
	if err := configError(problems); err != nil {
		return nil, err
	}
	s := &MemoryStore{
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

// MustMemoryStore is NewMemoryStore for configurations known to be valid;
// it panics on error.
func MustMemoryStore(cfg MemoryConfig) *MemoryStore {
	s, err := NewMemoryStore(cfg)
	if err != nil {
		panic(err)
	}
	return s
}

func (s *MemoryStore) shardOf(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// budget returns the registered budget called name, or nil.
func (s *MemoryStore) budget(name string) *memBudget {
	return s.budgets.Load().byName[name]
}

// register returns the registered budget called name, registering it.
func (s *MemoryStore) register(name string) *memBudget {
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

// Take implements [Store].
func (s *MemoryStore) Take(_ context.Context, items []Item, out []Outcome) error {
	if len(out) < len(items) {
		return errors.New("quotagate: memory store: fewer outcomes than items")
	}
	for i := range items {
		if err := checkItem(&items[i]); err != nil {
			return err
		}
	}
	now := nowMicros(s.clock)
	if len(items) == 1 {
		it := &items[0]
		sh := &s.shards[s.shardOf(it.Key)]
		sh.mu.Lock()
		evicted := s.take1(sh, it, &out[0], now)
		sh.mu.Unlock()
		if evicted != nil {
			s.report(evicted)
		}
		return nil
	}

	if err := CheckDistinct(items); err != nil {
		return fmt.Errorf("quotagate: memory store: %w", err)
	}
	var idxBuf [maxStackItems]int
	var nextBuf [maxStackItems]state
	var entBuf [maxStackItems]*memEntry
	idx, nexts, ents := idxBuf[:0], nextBuf[:0], entBuf[:0]
	if len(items) > maxStackItems {
		idx, nexts, ents = make([]int, 0, len(items)), make([]state, 0, len(items)), make([]*memEntry, 0, len(items))
	}
	for i := range items {
		idx = append(idx, s.shardOf(items[i].Key))
	}
	var orderBuf [maxStackItems]int
	locked := s.lockAll(idx, orderBuf[:0])
	evicted := s.takeN(items, out, now, idx, nexts, ents)
	s.unlockAll(locked)
	for _, b := range evicted {
		s.report(b)
	}
	return nil
}

// takeN is Take for several items, under the locks of their shards. It
// returns the budgets of the entries it evicted (allocated only then).
func (s *MemoryStore) takeN(items []Item, out []Outcome, now int64, idx []int, nexts []state, ents []*memEntry) (evicted []*memBudget) {
	reg := s.budgets.Load()
	allowed := true
	for i := range items {
		it := &items[i]
		sh := &s.shards[idx[i]]
		var st state
		var e *memEntry
		if sh.last != nil && sh.lastKey == it.Key && sh.lastBudget == it.Budget {
			e = sh.last
		} else if b := reg.byName[it.Budget]; b != nil {
			e = sh.find(b, it.Key)
		}
		if e != nil && e.matches(&it.Limit) {
			st = e.st
		}
		ents = append(ents, e)
		nexts = append(nexts, eval(&st, &it.Limit, it.Cost, now, &out[i]))
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
				var st state
				if e := ents[i]; e != nil && e.matches(&it.Limit) {
					st = e.st
				}
				out[i] = uncharged(&st, &it.Limit, now)
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
			e, ev = s.insert(&s.shards[idx[i]], s.register(it.Budget), it, now, ents)
			ents[i] = e
			if ev != nil {
				evicted = append(evicted, ev)
			}
		} else if !e.matches(&it.Limit) {
			e.reset(&it.Limit)
		}
		commit(&e.st, nexts[i], &it.Limit, it.Cost, now)
		e.expires = expiry(&e.st, &it.Limit)
		out[i].Charged = true
	}
	return evicted
}

// report counts an eviction from b and tells the observer.
func (s *MemoryStore) report(b *memBudget) {
	if s.observer != nil {
		s.observer.ObserveEviction(b.name)
	}
}

// checkItem rejects an item no algorithm can evaluate (the engine never
// builds one; a direct caller of the store might).
func checkItem(it *Item) error {
	l := &it.Limit
	bad := l.Quota <= 0 || l.Window < time.Millisecond || l.Window%time.Millisecond != 0 ||
		it.Cost < 0 || it.Cost > l.Capacity() || l.Algorithm < FixedWindow || l.Algorithm > Concurrency
	if !bad && (l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket) {
		bad = l.Burst <= 0 || l.Quota > l.Window.Microseconds()
	}
	if bad {
		return fmt.Errorf("quotagate: memory store: budget %q: cost %d cannot be evaluated under %+v", it.Budget, it.Cost, *l)
	}
	return nil
}

// take1 is Take for a single item, under its shard's lock. It returns the
// budget of the entry it evicted to make room, or nil.
func (s *MemoryStore) take1(sh *memShard, it *Item, o *Outcome, now int64) (evicted *memBudget) {
	l := &it.Limit
	var e *memEntry
	if sh.last != nil && sh.lastBudget == it.Budget {
		if sh.lastKey == it.Key {
			e = sh.last
		} else {
			e = sh.find(sh.lastB, it.Key)
		}
	} else if b := s.budget(it.Budget); b != nil {
		e = sh.find(b, it.Key)
	}
	if e == nil {
		var st state
		eval(&st, l, it.Cost, now, o)
		if !o.Allowed {
			return nil
		}
		e, evicted = s.insert(sh, s.register(it.Budget), it, now, nil)
	} else if !e.matches(l) {
		e.reset(l)
	}
	next := eval(&e.st, l, it.Cost, now, o)
	if o.Allowed {
		commit(&e.st, next, l, it.Cost, now)
		e.expires = expiry(&e.st, l)
		o.Charged = true
	}
	return evicted
}

// insert adds a new entry for it, of budget b, to sh, making room when sh
// is full (never by dropping one of keep). It returns the entry and the
// budget of a live entry evicted for it, if any. The caller holds sh.mu and
// knows (b, it.Key) has no entry.
func (s *MemoryStore) insert(sh *memShard, b *memBudget, it *Item, now int64, keep []*memEntry) (*memEntry, *memBudget) {
	var evicted *memBudget
	if sh.n >= s.maxPerShard && now-sh.swept >= capSweepEvery {
		// At the cap: first drop every expired entry of the shard (at most
		// once a second per shard, so a flood of new keys does not scan
		// on every request).
		sh.swept = now
		sh.sweep(now, keep)
	}
	if sh.n >= s.maxPerShard {
		evicted = s.evict(sh, b, now, keep)
	}
	t := sh.makeTable(b)
	e := &memEntry{lim: packLimit(&it.Limit)}
	t.m[it.Key] = e
	sh.n++
	sh.last, sh.lastKey, sh.lastBudget, sh.lastB = e, it.Key, b.name, b
	return e, evicted
}

// evict removes one entry of sh to make room for a new key of budget b, as
// [MemoryConfig].MaxEntries describes, and returns the evicted entry's
// budget when the entry was live (nil when it was free, or when every
// candidate is in keep).
func (s *MemoryStore) evict(sh *memShard, b *memBudget, now int64, keep []*memEntry) *memBudget {
	// The evicting budget: b itself when it holds its share, otherwise the
	// largest (which then holds more than its share).
	own, present := 0, 0
	largest, most := -1, 0
	for i := range sh.tables {
		n := len(sh.tables[i].m)
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
	if removed, victim := s.evictFrom(sh, target, now, keep); removed || target == largest {
		return victim
	}
	// b's own entries are all in keep: take from the largest instead.
	_, victim := s.evictFrom(sh, largest, now, keep)
	return victim
}

// evictFrom removes the entry of table id in sh that gives away the least
// among a sample, skipping keep. It reports whether it removed one, and
// returns the table's budget when that entry was live (an eviction).
func (s *MemoryStore) evictFrom(sh *memShard, id int, now int64, keep []*memEntry) (removed bool, live *memBudget) {
	t := &sh.tables[id]
	var victim string
	var ve *memEntry
	var least, soonest int64
	n := 0
	for k, e := range t.m {
		if slices.Contains(keep, e) || e.holds() {
			continue
		}
		owed := e.owed(now)
		if owed == 0 {
			sh.remove(t, k, e) // free: nothing is given away
			return true, nil
		}
		if ve == nil || owed < least || owed == least && e.expires < soonest {
			victim, ve, least, soonest = k, e, owed, e.expires
		}
		if n++; n == evictionSample {
			break
		}
	}
	if ve == nil {
		return false, nil
	}
	sh.remove(t, victim, ve)
	b := s.budgets.Load().byID[id]
	b.evictions.Add(1)
	s.evictions.Add(1)
	return true, b
}

// lockAll locks each distinct shard of idx once, in ascending order, so
// concurrent multi-item takes cannot deadlock. It returns the locked shards,
// appended to order.
func (s *MemoryStore) lockAll(idx, order []int) []int {
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

func (s *MemoryStore) unlockAll(order []int) {
	for j := len(order) - 1; j >= 0; j-- {
		s.shards[order[j]].mu.Unlock()
	}
}

// Refund implements [Store].
func (s *MemoryStore) Refund(_ context.Context, items []Item, outcomes []Outcome) error {
	if len(outcomes) < len(items) {
		return errors.New("quotagate: memory store: fewer outcomes than items")
	}
	now := nowMicros(s.clock)
	for i := range items {
		it, o := &items[i], &outcomes[i]
		if !o.Charged || it.Cost == 0 {
			continue
		}
		b := s.budget(it.Budget)
		if b == nil {
			continue
		}
		sh := &s.shards[s.shardOf(it.Key)]
		sh.mu.Lock()
		if e := sh.get(b, it.Key); e != nil && e.matches(&it.Limit) {
			refund(&e.st, &it.Limit, it.Cost, o, now)
			e.expires = expiry(&e.st, &it.Limit)
		}
		sh.mu.Unlock()
	}
	return nil
}

// Len returns the number of keys held, all budgets together, expired ones
// included until swept.
func (s *MemoryStore) Len() int {
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
func (s *MemoryStore) Evictions() uint64 { return s.evictions.Load() }

// BudgetEvictions returns how many live entries of the named budget have
// been evicted because their shard was full; 0 for a budget the store has
// never held.
func (s *MemoryStore) BudgetEvictions(budget string) uint64 {
	if b := s.budget(budget); b != nil {
		return b.evictions.Load()
	}
	return 0
}

// Sweep removes every expired entry now and returns how many it removed.
func (s *MemoryStore) Sweep() int {
	now := nowMicros(s.clock)
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		removed += sh.sweep(now, nil)
		sh.mu.Unlock()
	}
	return removed
}

func (s *MemoryStore) sweeper(every time.Duration) {
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
func (s *MemoryStore) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}
