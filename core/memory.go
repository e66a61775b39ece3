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
	// MaxEntries caps the number of keys held. The cap is enforced per
	// shard (MaxEntries/Shards each, rounded up). When a shard is full, a new
	// key evicts the entry that expires soonest among a sample of that
	// shard's entries (an expired one if the sample has one); an evicted
	// key starts afresh, so under a flood of distinct keys a real client's
	// count can be lost. A take never evicts an entry it has itself charged,
	// so a shard can exceed its share by the entries of one take (at most
	// the number of its items). Evictions are counted (see
	// [MemoryStore.Evictions]).
	// Default 1,048,576.
	MaxEntries int
	// Shards is the number of independently locked partitions, a power of
	// two. Default 256.
	Shards int
	// SweepInterval is how often a background goroutine removes expired
	// entries. Default one minute; negative disables the sweeper (expired
	// entries are then only replaced or evicted). Call Close to stop it.
	SweepInterval time.Duration
}

// MemoryStore is a [Store] that keeps state in this process. It is safe for
// concurrent use; requests on different keys rarely share a lock, and a
// decision on a key that already exists does not allocate.
type MemoryStore struct {
	clock       Clock
	shards      []memShard
	mask        uint64
	seed        maphash.Seed
	maxPerShard int
	evictions   atomic.Uint64
	stop        chan struct{}
	done        chan struct{}
	closeOnce   sync.Once
}

// evictionSample is how many entries an eviction looks at.
const evictionSample = 8

// maxStackItems is how many items a Take handles without allocating.
const maxStackItems = 16

type memKey struct{ budget, key string }

type memEntry struct {
	st      state
	alg     Algorithm
	window  time.Duration
	expires int64
}

type memShard struct {
	mu sync.Mutex
	m  map[memKey]*memEntry
	// last is the entry used most recently, so a hot key skips the map.
	last    *memEntry
	lastKey memKey
	swept   int64 // µs; when the shard was last swept because it was full
}

// capSweepEvery is how often a full shard is swept of expired entries
// before it evicts a live one (µs).
const capSweepEvery = 1_000_000

// sweep removes sh's expired entries, except those in keep, and returns how
// many. The caller holds sh.mu.
func (sh *memShard) sweep(now int64, keep []*memEntry) int {
	n := 0
	for k, e := range sh.m {
		if e.expires <= now && !slices.Contains(keep, e) {
			sh.remove(k)
			n++
		}
	}
	return n
}

// get returns the entry of k, or nil. The caller holds sh.mu.
func (sh *memShard) get(k memKey) *memEntry {
	if sh.last != nil && sh.lastKey == k {
		return sh.last
	}
	e := sh.m[k]
	if e != nil {
		sh.last, sh.lastKey = e, k
	}
	return e
}

// remove deletes k. The caller holds sh.mu.
func (sh *memShard) remove(k memKey) {
	if sh.last != nil && sh.lastKey == k {
		sh.last, sh.lastKey = nil, memKey{}
	}
	delete(sh.m, k)
}

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
	for i := range s.shards {
		s.shards[i].m = make(map[memKey]*memEntry)
	}
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
		s.take1(sh, it, &out[0], now)
		sh.mu.Unlock()
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
	defer s.unlockAll(locked)

	allowed := true
	for i := range items {
		it := &items[i]
		var st state
		e := s.shards[idx[i]].get(memKey{it.Budget, it.Key})
		if e != nil && e.matches(it.Limit) {
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
				if e := ents[i]; e != nil && e.matches(it.Limit) {
					st = e.st
				}
				out[i] = uncharged(&st, &it.Limit, now)
			}
		}
		return nil
	}
	// Charge, reusing the entries found above. ents also lists every entry
	// this take touches, so making room for a new one never evicts them (a
	// charge would be lost).
	for i := range items {
		if out[i].Allowed {
			it := &items[i]
			e := ents[i]
			if e == nil {
				e = s.entry(&s.shards[idx[i]], it, now, ents)
				ents[i] = e
			} else if !e.matches(it.Limit) {
				e.reset(it.Limit)
			}
			commit(&e.st, nexts[i], &it.Limit, it.Cost, now)
			e.expires = expiry(&e.st, &it.Limit)
			out[i].Charged = true
		}
	}
	return nil
}

// checkItem rejects an item no algorithm can evaluate (the engine never
// builds one; a direct caller of the store might).
func checkItem(it *Item) error {
	l := &it.Limit
	bad := l.Quota <= 0 || l.Window < time.Millisecond || l.Window%time.Millisecond != 0 ||
		it.Cost < 0 || it.Cost > l.Capacity() || l.Algorithm < FixedWindow || l.Algorithm > LeakyBucket
	if !bad && (l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket) {
		bad = l.Burst <= 0 || l.Quota > l.Window.Microseconds()
	}
	if bad {
		return fmt.Errorf("quotagate: memory store: budget %q: cost %d cannot be evaluated under %+v", it.Budget, it.Cost, *l)
	}
	return nil
}

// take1 is Take for a single item, under its shard's lock.
func (s *MemoryStore) take1(sh *memShard, it *Item, o *Outcome, now int64) {
	l := &it.Limit
	e := sh.get(memKey{it.Budget, it.Key})
	if e == nil {
		var st state
		eval(&st, l, it.Cost, now, o)
		if !o.Allowed {
			return
		}
		e = s.entry(sh, it, now, nil)
	} else if e.alg != l.Algorithm || e.window != l.Window {
		e.reset(*l)
	}
	next := eval(&e.st, l, it.Cost, now, o)
	if o.Allowed {
		commit(&e.st, next, l, it.Cost, now)
		e.expires = expiry(&e.st, l)
		o.Charged = true
	}
}

func (e *memEntry) matches(l Limit) bool {
	return e.alg == l.Algorithm && e.window == l.Window
}

func (e *memEntry) reset(l Limit) {
	*e = memEntry{alg: l.Algorithm, window: l.Window}
}

// entry returns the entry of it in sh, creating it (and evicting another,
// never one of keep, when sh is full). The caller holds sh.mu.
func (s *MemoryStore) entry(sh *memShard, it *Item, now int64, keep []*memEntry) *memEntry {
	k := memKey{it.Budget, it.Key}
	if e := sh.get(k); e != nil {
		if !e.matches(it.Limit) {
			e.reset(it.Limit)
		}
		return e
	}
	if len(sh.m) >= s.maxPerShard && now-sh.swept >= capSweepEvery {
		// At the cap: first drop every expired entry of the shard (at most
		// once a second per shard, so a flood of new keys does not scan
		// on every request).
		sh.swept = now
		sh.sweep(now, keep)
	}
	if len(sh.m) >= s.maxPerShard {
		s.evict(sh, now, keep)
	}
	e := &memEntry{alg: it.Limit.Algorithm, window: it.Limit.Window}
	sh.m[k] = e
	return e
}

// evict removes one entry of sh: the first expired one in a sample, or the
// one in the sample that expires soonest.
func (s *MemoryStore) evict(sh *memShard, now int64, keep []*memEntry) {
	var victim memKey
	soonest, n := int64(0), 0
	for k, e := range sh.m {
		if slices.Contains(keep, e) {
			continue
		}
		if e.expires <= now {
			sh.remove(k)
			return
		}
		if n == 0 || e.expires < soonest {
			victim, soonest = k, e.expires
		}
		if n++; n == evictionSample {
			break
		}
	}
	if n > 0 {
		sh.remove(victim)
		s.evictions.Add(1)
	}
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
		sh := &s.shards[s.shardOf(it.Key)]
		sh.mu.Lock()
		if e := sh.m[memKey{it.Budget, it.Key}]; e != nil && e.matches(it.Limit) {
			refund(&e.st, &it.Limit, it.Cost, o, now)
			e.expires = expiry(&e.st, &it.Limit)
		}
		sh.mu.Unlock()
	}
	return nil
}

// Len returns the number of keys held, expired ones included until swept.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many live entries have been evicted because their
// shard was full.
func (s *MemoryStore) Evictions() uint64 { return s.evictions.Load() }

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
