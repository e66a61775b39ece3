package core

// entryOf returns the entry of (budget, key) in s, or nil.
func (s *MemoryStore) entryOf(budget, key string) *memEntry {
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
