package redisstore

// kill makes s behave as an instance that died: its leases are dropped
// without being given back (their units stay charged in Redis), its
// timers stop, and it takes no lease again.
func (s *Store) kill() {
	l := s.leases
	l.killed.Store(true)
	l.closed.Store(true)
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			e.mu.Lock()
			if e.timer != nil {
				e.timer.Stop()
			}
			l.stranded.Add(e.units)
			e.units = 0
			e.gen++
			e.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
}

// leaseUnits returns the units s's lease for budget and key holds.
func (s *Store) leaseUnits(budget, key string) int64 {
	l := s.leases
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		e := sh.m[leaseKey{budget, key}]
		sh.mu.RUnlock()
		if e != nil {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.units
		}
	}
	return 0
}
