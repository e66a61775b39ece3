package pacer

import (
	"sync"
	"time"
)

// paceTable holds what servers said about their budgets, per pacing scope
// (the request's host by default) and policy, shared by every goroutine
// that uses one Transport.
//
// The rule it enforces is the one draft-ietf-httpapi-ratelimit-headers
// gives clients: do not send more than r requests before t. With many
// requests in flight, a response's r is not the whole story: the server may
// or may not have counted the attempts still in flight when it answered.
// So the table lets an attempt start only while r minus the attempts in
// flight is positive, and it keeps, per policy, the freshest r it can be
// sure of:
//
//   - a response to an attempt started after the current r was learned
//     was processed later, so its r replaces the current one;
//   - a response to an attempt that overlapped it may have been processed
//     earlier or later; the lower r of the two is kept (within a window the
//     remaining quota only falls), unless its reset lies more than half a
//     window before the current one, which marks it as a report from the
//     previous window.
//
// Once every attempt has been answered, the estimate is exact; while some
// are in flight it errs on the side of sending too little.
//
// When t passes, a policy whose quota q and window are known allows q more
// until one more window has passed (w when the server gave it, else the
// longest t seen); one whose quota is unknown stops constraining until the
// next report.
//
// No reset is believed further ahead than maxReset: a server that names a
// longer one (a nonsense value, milliseconds sent as seconds) is read as
// naming maxReset, and a window longer than maxReset is not renewed. When
// such a reset passes, or such a window would be renewed, or a Retry-After
// block passes, the scope probes: one attempt goes and the others wait for
// its answer, which says what holds now. An attempt that fails without an
// answer leaves the probing to the next.
type paceTable struct {
	mu       sync.Mutex
	scopes   map[string]*paceScope
	maxReset time.Duration
}

// maxScopes bounds how many scopes a paceTable tracks. When it is reached,
// scopes with no live constraint are dropped; if none can be, requests to
// new scopes go unpaced (their retries still honour Retry-After).
const maxScopes = 4096

// maxPolicies bounds the policies tracked per scope.
const maxPolicies = 16

type paceScope struct {
	mu       sync.Mutex
	maxReset time.Duration
	seq      uint64 // attempts started in this scope
	inflight int64  // attempts started and not yet answered
	policies map[string]*policyState
	changed  chan struct{} // closed and replaced when any policy changes
	probing  bool          // the next attempt asks for the others
	prober   uint64        // the seq of that attempt while it is in flight, else 0
}

type policyState struct {
	remaining int64         // r as last learned
	until     time.Time     // when the constraint lapses (t)
	learned   uint64        // the scope's seq when remaining was learned
	quota     int64         // q, or -1 when unknown
	window    time.Duration // w, or the longest t seen; 0 when unknown
	given     bool          // window is the server's w
	probe     bool          // until was cut to maxReset, or is a Retry-After's: the scope probes when it passes
}

func newPaceTable(maxReset time.Duration) *paceTable {
	return &paceTable{scopes: make(map[string]*paceScope), maxReset: maxReset}
}

// scope returns the scope named key, creating it if there is room.
func (p *paceTable) scope(key string, now time.Time) *paceScope {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.scopes[key]; s != nil {
		return s
	}
	if len(p.scopes) >= maxScopes {
		for k, s := range p.scopes {
			if s.idle(now) {
				delete(p.scopes, k)
			}
		}
		if len(p.scopes) >= maxScopes {
			return nil
		}
	}
	s := &paceScope{maxReset: p.maxReset, policies: make(map[string]*policyState)}
	p.scopes[key] = s
	return s
}

// idle reports whether s has no attempt in flight and every policy of s
// has been quiet for a whole window past its reset, so that forgetting it
// loses nothing.
func (s *paceScope) idle(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight > 0 {
		return false
	}
	for _, st := range s.policies {
		if now.Before(st.until.Add(st.window)) {
			return false
		}
	}
	return true
}

// reserve counts one attempt starting at now and returns its sequence
// number, or, when some policy is spent, how long to wait before asking
// again and a channel closed if the state changes sooner. The wait is hard
// when a policy has nothing left until its reset, soft when only attempts
// in flight hold the last units, or a probe is in flight (their answers
// will tell). Every attempt reserved must be ended with done.
func (s *paceScope) reserve(now time.Time) (seq uint64, wait time.Duration, hard bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, st := range s.policies {
		if !now.Before(st.until) {
			far := st.probe || st.window > s.maxReset
			if far || st.quota < 0 || st.window <= 0 {
				s.probing = s.probing || far
				delete(s.policies, name)
				continue
			}
			// A new window: q more units until one more window has passed.
			n := now.Sub(st.until)/st.window + 1
			st.until = st.until.Add(n * st.window)
			st.remaining = st.quota
			st.learned = s.seq
		}
		if st.remaining-s.inflight <= 0 {
			wait = max(wait, st.until.Sub(now))
			hard = hard || st.remaining <= 0
		}
	}
	if s.prober != 0 && wait == 0 {
		wait = s.maxReset // until the probe's answer, which changed tells
	}
	if wait > 0 {
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		return 0, wait, hard, s.changed
	}
	s.seq++
	s.inflight++
	if s.probing {
		s.prober = s.seq
	}
	return s.seq, 0, false, nil
}

// done ends attempt seq, answered at now (when answered) with the given
// reports (none when the response said nothing).
func (s *paceScope) done(seq uint64, answered bool, reports []policyReport, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if seq == s.prober {
		s.prober = 0
		s.probing = !answered
	}
	for i := range reports {
		rep := &reports[i]
		st := s.policies[rep.name]
		if st == nil {
			if len(s.policies) >= maxPolicies {
				continue
			}
			st = &policyState{quota: -1}
			s.policies[rep.name] = st
		}
		if rep.quota >= 0 {
			st.quota = rep.quota
		}
		switch {
		case rep.window > 0:
			st.window, st.given = rep.window, true
		case rep.hasReset && !st.given:
			st.window = max(st.window, rep.reset)
		}
		reset := rep.reset
		if !rep.hasReset {
			if st.window <= 0 {
				continue // no time to pace by
			}
			reset = st.window
		}
		until := now.Add(min(reset, s.maxReset))
		if seq <= st.learned {
			// The attempt overlapped the one st was learned from.
			if rep.remaining >= st.remaining || until.Before(st.until.Add(-st.window/2)) {
				continue
			}
		}
		st.remaining, st.until, st.learned = rep.remaining, until, s.seq
		st.probe = reset > s.maxReset
	}
	// Waiters re-check: an answered attempt frees a unit in any case.
	s.notify()
}

// block makes every attempt in s wait until now+d at least (d cut to
// maxReset), and the scope probe then: a server asked for that with
// Retry-After and said nothing about its budgets. A block set by the
// answer to an attempt is set before done ends the attempt, so that no
// attempt waiting for that answer starts in between.
func (s *paceScope) block(d time.Duration, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.policies[retryAfterPolicy]
	if st == nil {
		st = &policyState{quota: -1}
		s.policies[retryAfterPolicy] = st
	}
	if until := now.Add(min(d, s.maxReset)); until.After(st.until) {
		st.until, st.remaining, st.learned = until, 0, s.seq
	}
	st.probe = true
	s.notify()
}

func (s *paceScope) notify() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}
