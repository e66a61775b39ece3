package memstore

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/algorithm"
)

// memEntry is one key's state in one budget: 64 bytes, one cache line.
//
// Most takes charge an entry without a lock: for a fixed window (quota
// below 2^31, and a window whose index, its start over its length, is
// below 2^32: longer than about 0.41 s in 2026) and for the buckets, the whole
// state fits in the word w, and a take is one compare-and-swap on it
// (tryCharge). Every other access holds mu and, while it does, a lock bit
// in w that makes those compare-and-swaps fail, so it sees and changes
// the state alone: multi-item takes, refunds, evictions, sweeps, limit
// changes, and the algorithms whose state does not fit a word.
//
// A removed entry is marked dead under mu; its lock bit stays set, so no
// compare-and-swap charges it after that, and a take that found it through
// the shard's hot entry looks again.
type memEntry struct {
	mu sync.Mutex
	// w is the packed state, shifted left once over the lock bit, when lim
	// has limPacked; otherwise it is state.a shifted the same way, with
	// the lock bit always set, and b, c and log are the rest.
	w   atomic.Uint64
	b   int64
	c   int64
	log *algorithm.Log
	// lim is packLimit of the limit the state was built under, with
	// limPacked when w holds all of it; deadEntry once removed. It changes
	// only under mu.
	lim atomic.Int64
	// The key (its bytes and length) and the budget's id, set before the
	// entry is shared, then read-only: 16 bytes where a string and a
	// budget pointer would take 24, so that the entry fits one cache line.
	kp  *byte
	kn  uint32
	bid uint32
}

const (
	// wLocked is w's lock bit, set while a holder of mu works on a packed
	// entry.
	wLocked = 1
	// limPacked marks a lim whose state w holds (bit 3: packLimit uses
	// bits 0 to 2 for the algorithm, and a window in nanoseconds is a
	// multiple of 2^6).
	limPacked = 8
	// deadEntry is the lim of an entry removed from its table; no limit
	// packs to it.
	deadEntry = -1
	// maxMemKey is the longest key the memory store holds, in bytes.
	maxMemKey = math.MaxUint32
)

// newMemEntry returns an entry of budget b for key, with an empty state for
// l. The caller has checked that key fits (maxMemKey).
func newMemEntry(key string, b *memBudget, l *core.Limit) *memEntry {
	e := &memEntry{kp: unsafe.StringData(key), kn: uint32(len(key)), bid: uint32(b.id)}
	e.setState(algorithm.State{}, l)
	if e.lim.Load()&limPacked != 0 {
		e.w.Store(e.w.Load() &^ wLocked)
	}
	return e
}

// key returns e's key.
func (e *memEntry) key() string { return unsafe.String(e.kp, e.kn) }

// packLimit packs what an entry's state depends on: the window and the
// algorithm. A window is a whole number of milliseconds (Limit.Validate), so
// its low 6 bits in nanoseconds are zero and hold the algorithm.
// A core.Concurrency state (slots held) does not depend on the window (the
// lease), so a changed lease keeps the slots held.
func packLimit(l *core.Limit) int64 {
	if l.Algorithm == core.Concurrency {
		return int64(core.Concurrency)
	}
	return int64(l.Window) | int64(l.Algorithm)
}

// limitOf returns the algorithm and window that lim packs.
func limitOf(lim int64) core.Limit {
	return core.Limit{Algorithm: core.Algorithm(lim & 7), Window: time.Duration(lim &^ 63)}
}

// packState packs st, a state of l, into w's form (without the lock
// bit), and reports whether it fits: a token or leaky bucket's TAT below
// 2^62; a fixed window's count below 2^31 and its window's index (its
// start over its length) below 2^32.
func packState(st *algorithm.State, l *core.Limit) (uint64, bool) {
	switch l.Algorithm {
	case core.TokenBucket, core.LeakyBucket:
		if st.A >= 0 && st.A < 1<<62 {
			return uint64(st.A) << 1, true
		}
	case core.FixedWindow:
		w := l.Window.Microseconds()
		if st.A >= 0 && st.A%w == 0 && st.A/w < 1<<32 && st.B >= 0 && st.B < 1<<31 {
			return (uint64(st.A/w)<<31 | uint64(st.B)) << 1, true
		}
	}
	return 0, false
}

// unpackState is the state of l that word (w's value) holds.
func unpackState(word uint64, l *core.Limit) algorithm.State {
	word >>= 1
	if l.Algorithm == core.FixedWindow {
		return algorithm.State{A: int64(word>>31) * l.Window.Microseconds(), B: int64(word & (1<<31 - 1))}
	}
	return algorithm.State{A: int64(word)}
}

// lock gives the caller e alone: mu, and w's lock bit when w holds the
// state, so that no take charges it without the lock meanwhile.
func (e *memEntry) lock() {
	e.mu.Lock()
	if e.lim.Load()&limPacked != 0 && e.lim.Load() != deadEntry {
		for {
			old := e.w.Load()
			if e.w.CompareAndSwap(old, old|wLocked) {
				return
			}
		}
	}
}

// unlock undoes lock. A dead entry keeps its lock bit.
func (e *memEntry) unlock() {
	if lim := e.lim.Load(); lim&limPacked != 0 && lim != deadEntry {
		e.w.Store(e.w.Load() &^ wLocked)
	}
	e.mu.Unlock()
}

// state returns e's state. The caller holds e's lock.
func (e *memEntry) state() algorithm.State {
	lim := e.lim.Load()
	if lim&limPacked != 0 {
		l := limitOf(lim)
		return unpackState(e.w.Load(), &l)
	}
	return algorithm.State{A: int64(e.w.Load()) >> 1, B: e.b, C: e.c, Log: e.log}
}

// setState makes st, a state of l, e's state, packed into w when it fits.
// The caller holds e's lock (or is creating e). w keeps its lock bit set
// throughout, so a take that read lim before the change cannot charge w.
func (e *memEntry) setState(st algorithm.State, l *core.Limit) {
	lim := packLimit(l)
	if word, ok := packState(&st, l); ok {
		e.b, e.c, e.log = 0, 0, nil
		e.w.Store(word | wLocked) // unlock clears it
		e.lim.Store(lim | limPacked)
		return
	}
	e.w.Store(uint64(st.A)<<1 | wLocked) // set for good
	e.b, e.c, e.log = st.B, st.C, st.Log
	e.lim.Store(lim)
}

// matches reports whether e's state was built under l's algorithm and
// window. The caller holds e's lock, or reads it once before a
// compare-and-swap.
func (e *memEntry) matches(l *core.Limit) bool { return e.lim.Load()&^limPacked == packLimit(l) }

// dead reports whether e was removed from its table.
func (e *memEntry) dead() bool { return e.lim.Load() == deadEntry }

// kill marks e removed. The caller holds e's lock, whose bit stays set.
func (e *memEntry) kill() { e.lim.Store(deadEntry) }

// tryCharge takes it from e without a lock, when w holds e's state under
// it's limit and no holder of e's lock is working on it: it evaluates the
// state and, when allowed, charges it with one compare-and-swap. It
// reports false, with o undefined, when the caller must take e's lock and
// charge it (charge): when the state does not fit w, or when another take
// changed it first. A contended key thus queues its takers on the lock
// instead of letting them retry the swap, each retry reading the clock
// again (docs/performance.md, In memory, has the measurement).
//
// It reads the clock c after it reads the state: a charge that succeeds
// then never evaluates e at a time older than the charges it builds on (a
// take that read the clock, was descheduled and then charged would
// otherwise see a newer window's state as an old one and write the old
// window back, losing the newer window's charges).
//
// A limit change (under the lock) that leaves w with the very value this
// take read, which happens only when the state is empty under both limits,
// lets one charge computed under the old limit through: one request, at
// the moment of the change, counted against the other limit.
func (e *memEntry) tryCharge(it *core.Item, o *core.Outcome, c core.Clock) bool {
	l := &it.Limit
	if lim := e.lim.Load(); lim&limPacked == 0 || lim == deadEntry || lim&^limPacked != packLimit(l) {
		return false
	}
	old := e.w.Load()
	if old&wLocked != 0 {
		return false
	}
	now := nowMicros(c)
	st := unpackState(old, l)
	ws := st.A
	next := algorithm.Eval(&st, l, it.Cost, now, o)
	if !o.Allowed {
		return true
	}
	algorithm.Commit(&st, next, l, it.Cost, now)
	var word uint64
	if l.Algorithm == core.FixedWindow && st.A == ws && st.B < 1<<31 {
		// The same window: keep its index, and spare packState's
		// division.
		word = old&^(1<<32-1) | uint64(st.B)<<1
	} else if w, ok := packState(&st, l); ok {
		word = w
	} else {
		return false // the locked charge stores it unpacked
	}
	if !e.w.CompareAndSwap(old, word) {
		return false // another take charged first: queue on the lock
	}
	o.Charged = true
	return true
}

// chargeLive takes it from e, without a lock when tryCharge can, under
// e's lock otherwise, and reports true; or reports false, charging
// nothing, when e was removed from its table.
func (e *memEntry) chargeLive(it *core.Item, o *core.Outcome, c core.Clock) bool {
	if e.tryCharge(it, o, c) {
		return true
	}
	e.lock()
	defer e.unlock()
	if e.dead() {
		return false
	}
	e.charge(it, o, nowMicros(c)) // read under the lock: see tryCharge
	return true
}

// charge evaluates it against e and, when it is allowed, charges e. The
// caller holds e's lock, and e is not dead.
func (e *memEntry) charge(it *core.Item, o *core.Outcome, now int64) {
	l := &it.Limit
	var st algorithm.State
	if e.matches(l) {
		st = e.state()
	}
	next := algorithm.Eval(&st, l, it.Cost, now, o)
	if o.Allowed {
		algorithm.Commit(&st, next, l, it.Cost, now)
		o.Charged = true
		e.setState(st, l)
	} else if !e.matches(l) {
		e.setState(algorithm.State{}, l)
	}
}

// glance returns e's state and lim without its lock, when w holds the
// state: a snapshot that a take may change the next moment, for choosing
// what to sweep or evict, never for charging. ok is false when e's lock is
// needed to read the state.
func (e *memEntry) glance() (st algorithm.State, lim int64, ok bool) {
	lim = e.lim.Load()
	if lim&limPacked == 0 || lim == deadEntry {
		return algorithm.State{}, lim, false
	}
	l := limitOf(lim)
	return unpackState(e.w.Load()&^wLocked, &l), lim, true
}

// view returns e's state and lim: a glance when one suffices, otherwise
// read under e's lock.
func (e *memEntry) view() (algorithm.State, int64) {
	if st, lim, ok := e.glance(); ok {
		return st, lim
	}
	e.lock()
	defer e.unlock()
	return e.state(), e.lim.Load()
}

// expires is the time (µs) from which e is equivalent to an empty state.
// The caller holds e's lock.
func (e *memEntry) expires() int64 {
	return expiresOf(e.state(), e.lim.Load())
}

// owed is how much the entry's key would be given back if the entry were
// dropped at now (owedOf). The caller holds e's lock.
func (e *memEntry) owed(now int64) int64 {
	return owedOf(e.state(), e.lim.Load(), now)
}

// expiresOf is the time (µs) from which st, a state under the limit lim
// packs, is equivalent to an empty state.
func expiresOf(st algorithm.State, lim int64) int64 {
	l := limitOf(lim)
	return algorithm.Expiry(&st, &l)
}

// owedOf is how much a key whose state is st, under the limit lim packs,
// would be given back if its entry were dropped at now: 0 for a state
// equivalent to an empty one, otherwise a measure that grows with the
// units still counting (units for window algorithms, µs of bucket debt for
// buckets), comparable between entries of one budget.
func owedOf(st algorithm.State, lim, now int64) int64 {
	if expiresOf(st, lim) <= now {
		return 0
	}
	switch core.Algorithm(lim & 7) {
	case core.FixedWindow:
		return st.B
	case core.SlidingWindow:
		return st.B + st.C
	case core.TokenBucket, core.LeakyBucket:
		return max(0, st.A-now)
	case core.SlidingLog:
		if g := st.Log; g != nil {
			return g.Sum()
		}
	case core.Concurrency:
		return st.A
	}
	return 0
}
