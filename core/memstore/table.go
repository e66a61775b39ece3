package memstore

import "sync/atomic"

// memTable is one budget's entries in one shard: an open-addressing hash
// table with linear probing, keyed by the key's 64-bit hash, which the
// store computes once per key to pick the shard. A lookup reads one slot
// line and the entry it points to, where a map[string]*memEntry reads a
// control word, a slot, the stored key's bytes and then the entry.
//
// The shard's lock guards every change. A take may also look an entry up
// without the lock (Store.take1), in the slots published in view: it
// reads each slot's fields atomically, so a lookup that races a change
// may miss an entry (the take then looks again under the lock), but what
// it finds is an entry whose key is the one it looked for, live or
// already removed (dead), which the take's charge tells apart.
type memTable struct {
	slots []memSlot // len is a power of two (or 0); at most 3/4 full
	n     int
	view  atomic.Pointer[[]memSlot] // slots, for lookups without the lock
}

// memSlot is a slot of a memTable: an entry and its key's hash; e is nil
// for an empty slot.
type memSlot struct {
	h atomic.Uint64
	e atomic.Pointer[memEntry]
}

// set stores e, whose key hashes to h, in sl (nil and 0 empty it).
func (sl *memSlot) set(h uint64, e *memEntry) {
	sl.h.Store(h)
	sl.e.Store(e)
}

// home is the slot a hash probes first. The shard index uses the hash's
// low bits, so the slot index takes the high ones.
func (t *memTable) home(h uint64) int { return home(h, len(t.slots)) }

func home(h uint64, size int) int { return int(h>>32) & (size - 1) }

// lookup returns the entry of key, whose hash is h, or nil. The caller
// holds the shard's lock.
func (t *memTable) lookup(h uint64, key string) *memEntry { return lookupIn(t.slots, h, key) }

// lookupIn returns the entry of key, whose hash is h, in slots, or nil.
// It probes at most len(slots) slots, so that a lookup without the lock
// ends however the slots change under it.
func lookupIn(slots []memSlot, h uint64, key string) *memEntry {
	if len(slots) == 0 {
		return nil
	}
	mask := len(slots) - 1
	for k, i := 0, home(h, len(slots)); k < len(slots); k, i = k+1, (i+1)&mask {
		sl := &slots[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if sl.h.Load() == h && e.key() == key {
			return e
		}
	}
	return nil
}

// insert adds e, whose key hashes to h and has no entry in t.
func (t *memTable) insert(h uint64, e *memEntry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(8, 2*len(t.slots)))
	}
	t.place(h, e)
	t.n++
}

// place puts e in the first empty slot of its probe sequence.
func (t *memTable) place(h uint64, e *memEntry) {
	mask := len(t.slots) - 1
	i := t.home(h)
	for t.slots[i].e.Load() != nil {
		i = (i + 1) & mask
	}
	t.slots[i].set(h, e)
}

// resize moves every entry to a table of size slots (none: nil), and
// publishes them.
func (t *memTable) resize(size int) {
	old := t.slots
	t.slots = nil
	if size > 0 {
		t.slots = make([]memSlot, size)
	}
	for i := range old {
		if e := old[i].e.Load(); e != nil {
			t.place(old[i].h.Load(), e)
		}
	}
	view := new([]memSlot)
	*view = t.slots
	t.view.Store(view)
}

// delete removes the entry in slot i, shifting the entries after it back
// so that every entry stays reachable from its home slot.
func (t *memTable) delete(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].e.Load() != nil; j = (j + 1) & mask {
		// The entry at j may move to the hole at i when its home is not
		// in the cyclic range (i, j].
		sl := &t.slots[j]
		if home := t.home(sl.h.Load()); (j-home)&mask >= (j-i)&mask {
			t.slots[i].set(sl.h.Load(), sl.e.Load())
			i = j
		}
	}
	t.slots[i].set(0, nil)
	t.n--
}

// shrink halves the table while it would stay at most 1/4 full, so a table
// that held a flood gives its memory back once the flood's keys are swept.
func (t *memTable) shrink() {
	size := len(t.slots)
	for size > 8 && t.n*4 <= size/2 {
		size /= 2
	}
	if t.n == 0 {
		if t.slots != nil {
			t.resize(0)
		}
	} else if size < len(t.slots) {
		t.resize(size)
	}
}
