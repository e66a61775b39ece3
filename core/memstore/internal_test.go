package memstore

import (
	"testing"
	"unsafe"
)

// entryOf returns the entry of (budget, key) in s, or nil.
func (s *Store) entryOf(budget, key string) *memEntry {
	b := s.budget(budget)
	if b == nil {
		return nil
	}
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.find(b, h, key)
}

// A shard is two cache lines: what a take reads before it locks anything,
// then the lock and what it guards.
func TestMemShardLayout(t *testing.T) {
	var sh memShard
	if size := unsafe.Sizeof(sh); size != 128 {
		t.Fatalf("memShard is %d bytes, want 128", size)
	}
	if off := unsafe.Offsetof(sh.mu); off != 64 {
		t.Fatalf("memShard.mu is at byte %d, want 64", off)
	}
}

// An entry is one cache line.
func TestMemEntryLayout(t *testing.T) {
	if size := unsafe.Sizeof(memEntry{}); size != 64 {
		t.Fatalf("memEntry is %d bytes, want 64", size)
	}
}
