package memstore

// memTable is one budget's entries in one shard: an open-addressing hash
// table with linear probing, keyed by the key's 64-bit hash, which the
// store computes once per key to pick the shard. A lookup reads one slot
// line and the entry it points to, where a map[string]*memEntry reads a
// control word, a slot, the stored key's bytes and then the entry. The
// caller holds the shard's lock.
type memTable struct {
	slots []memSlot // len is a power of two (or 0); at most 3/4 full
	n     int
}

// memSlot is a slot of a memTable: an entry and its key's hash; e is nil
// for an empty slot.
type memSlot struct {
	h uint64
	e *memEntry
}

// home is the slot a hash probes first. The shard index uses the hash's
// low bits, so the slot index takes the high ones.
func (t *memTable) home(h uint64) int { return int(h>>32) & (len(t.slots) - 1) }

// lookup returns the entry of key, whose hash is h, or nil.
func (t *memTable) lookup(h uint64, key string) *memEntry {
	if len(t.slots) == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.e == nil {
			return nil
		}
		if sl.h == h && sl.e.key() == key {
			return sl.e
		}
	}
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
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = memSlot{h: h, e: e}
}

// resize moves every entry to a table of size slots.
func (t *memTable) resize(size int) {
	old := t.slots
	t.slots = make([]memSlot, size)
	for _, sl := range old {
		if sl.e != nil {
			t.place(sl.h, sl.e)
		}
	}
}

// delete removes the entry in slot i, shifting the entries after it back
// so that every entry stays reachable from its home slot.
func (t *memTable) delete(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].e != nil; j = (j + 1) & mask {
		// The entry at j may move to the hole at i when its home is not
		// in the cyclic range (i, j].
		if home := t.home(t.slots[j].h); (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = memSlot{}
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
		t.slots = nil
	} else if size < len(t.slots) {
		t.resize(size)
	}
}
