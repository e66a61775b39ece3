package core

// entryOf returns the entry of (budget, key) in s, or nil.
func (s *MemoryStore) entryOf(budget, key string) *memEntry {
	b := s.budget(budget)
	if b == nil {
		return nil
	}
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.table(b); t != nil {
		return t.m[key]
	}
	return nil
}
