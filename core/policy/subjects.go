package policy

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Subject is what the application knows about whoever a key belongs to (a
// tenant, an organisation): the facts quota resolution needs. The quota
// itself is never stored here, only the facts it is computed from, so a
// reloaded configuration (new reference quotas, new tier shares) applies to
// cached subjects at once.
type Subject struct {
	// Tier is a tier pinned by an operator. When set it wins over the tier
	// derived from Cap.
	Tier string
	// Cap is the licensed capacity tiers are derived from (for example the
	// subscriber cap of a licence). NoCap (any negative value) means the
	// licence has no cap, which derives the top tier. The zero value
	// derives the smallest tier.
	Cap int64
	// Plan names the subject's plan; its increases are added to the base
	// quota of by-plan budgets. Empty means no plan.
	Plan string
	// Overrides maps a budget name to a quota that replaces whatever that
	// budget would otherwise resolve to (base + plan, or the tier's
	// quota). Flat budgets ignore it.
	Overrides map[string]int64
}

// NoCap is the Subject.Cap of a licence without a cap.
const NoCap int64 = -1

// A LookupFunc returns the subject a key belongs to, typically by asking
// the application's database. It is called on a cache miss only, once per
// key however many requests miss together. ctx carries the values of the
// request that missed but not its cancellation, with the cache's Timeout.
type LookupFunc func(ctx context.Context, key string) (Subject, error)

// CacheConfig configures a [Subjects] cache. The zero value is usable.
type CacheConfig struct {
	// Size caps the number of keys held; when full, a new key evicts an
	// expired entry or the one that expires soonest among a sample.
	// Default 10,000.
	Size int
	// TTL is how long a looked-up subject is used before it is looked up
	// again. Changes the application makes take effect within TTL, or at
	// once after Invalidate. Default 30s.
	TTL time.Duration
	// ErrorTTL is how long a failed lookup is remembered before the next
	// attempt, so a failing backend is not called on every request.
	// Default 1s.
	ErrorTTL time.Duration
	// MaxStale is how long past its TTL a subject may still be served while
	// lookups for it fail (then retried every ErrorTTL). Default: TTL.
	// Negative: never serve a stale subject.
	MaxStale time.Duration
	// Timeout bounds one lookup. Default 2s.
	Timeout time.Duration
	// Clock tells the time. Default: a core.SystemClock.
	Clock core.Clock
	// OnError, when set, is told about every failed lookup, including those
	// hidden by a stale subject or a fallback tier. It must be quick and
	// safe for concurrent use. The key is not passed: it may identify a
	// customer.
	OnError func(err error)
}

// Subjects is a bounded cache of subjects in front of a [LookupFunc].
//
// On a hit it costs one map read under a sharded lock and does not
// allocate. Concurrent misses for one key run one lookup; the others wait
// for it (or, when an expired subject is still within MaxStale, are served
// that subject at once while the lookup runs).
//
// When a lookup fails: an expired subject within MaxStale is served and the
// lookup is retried after ErrorTTL; otherwise the error is remembered for
// ErrorTTL and returned, and the budget's resolution applies its fallback
// (see [Resolver.Quota]). A panicking lookup counts as a failed one.
type Subjects struct {
	lookup  LookupFunc
	cfg     CacheConfig
	seed    maphash.Seed
	shards  [subjectShards]subjectShard
	lookups atomic.Uint64
}

// subjectShards is the number of lock shards of a Subjects cache.
//
// The memory store (memstore.Store) is also a sharded map with expiring
// entries and sampled eviction, and the two are kept apart on purpose:
// they share the shape, not the work. The store mutates algorithm state in
// place under its shard locks, takes several keys atomically (locks taken
// in shard order), keeps one table per budget so that one budget's flood
// cannot evict another's counters, and must not allocate per decision.
// This cache holds immutable results of a slow call into the application:
// it needs one lookup per key however many requests miss together (the
// calls map), serving a stale subject while lookups fail, remembering
// failures for ErrorTTL, and Invalidate discarding a lookup in flight. A
// common sharded map would carry both sets of needs and save about forty
// lines; each would then be harder to read and to change.
const subjectShards = 16

type subjectShard struct {
	mu    sync.Mutex
	m     map[string]*subjectEntry
	calls map[string]*subjectCall
	max   int
}

type subjectEntry struct {
	s     Subject
	err   error // non-nil: a remembered failure
	fresh int64 // unix ns until which the entry is used as is
	stale int64 // unix ns until which s may be served while lookups fail
}

type subjectCall struct {
	done    chan struct{}
	s       Subject
	err     error
	invalid bool // invalidated while running: result not cached
}

// NewSubjects returns a cache in front of lookup.
func NewSubjects(lookup LookupFunc, cfg CacheConfig) (*Subjects, error) {
	var problems []string
	if lookup == nil {
		problems = append(problems, "no lookup function")
	}
	if cfg.Size == 0 {
		cfg.Size = 10_000
	}
	if cfg.TTL == 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.ErrorTTL == 0 {
		cfg.ErrorTTL = time.Second
	}
	if cfg.MaxStale == 0 {
		cfg.MaxStale = cfg.TTL
	}
	if cfg.MaxStale < 0 {
		cfg.MaxStale = 0
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = core.NewSystemClock()
	}
	if cfg.Size < 0 {
		problems = append(problems, fmt.Sprintf("size %d is negative", cfg.Size))
	}
	if cfg.TTL < 0 {
		problems = append(problems, fmt.Sprintf("TTL %v is negative", cfg.TTL))
	}
	if cfg.ErrorTTL < 0 {
		problems = append(problems, fmt.Sprintf("error TTL %v is negative", cfg.ErrorTTL))
	}
	if cfg.Timeout < 0 {
		problems = append(problems, fmt.Sprintf("timeout %v is negative", cfg.Timeout))
	}
	if len(problems) > 0 {
		return nil, errors.New("policy: subjects cache: " + strings.Join(problems, "; "))
	}
	s := &Subjects{lookup: lookup, cfg: cfg, seed: maphash.MakeSeed()}
	per := (cfg.Size + subjectShards - 1) / subjectShards
	for i := range s.shards {
		s.shards[i].m = make(map[string]*subjectEntry)
		s.shards[i].calls = make(map[string]*subjectCall)
		s.shards[i].max = per
	}
	return s, nil
}

// MustSubjects is NewSubjects for configurations known to be valid; it
// panics on error.
func MustSubjects(lookup LookupFunc, cfg CacheConfig) *Subjects {
	s, err := NewSubjects(lookup, cfg)
	if err != nil {
		panic(err)
	}
	return s
}

func (s *Subjects) shard(key string) *subjectShard {
	return &s.shards[maphash.String(s.seed, key)%subjectShards]
}

func (s *Subjects) now() int64 { return s.cfg.Clock.Now().UnixNano() }

// Get returns the subject of key, from the cache or by a lookup.
func (s *Subjects) Get(ctx context.Context, key string) (Subject, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	now := s.now()
	sh := s.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e != nil && now < e.fresh {
		sub, err := e.s, e.err
		sh.mu.Unlock()
		return sub, err
	}
	if c := sh.calls[key]; c != nil {
		if e != nil && e.err == nil && now < e.stale {
			sub := e.s
			sh.mu.Unlock()
			return sub, nil
		}
		sh.mu.Unlock()
		select {
		case <-c.done:
			return c.s, c.err
		case <-ctx.Done():
			return Subject{}, ctx.Err()
		}
	}
	c := &subjectCall{done: make(chan struct{})}
	sh.calls[key] = c
	sh.mu.Unlock()

	sub, err := s.call(ctx, key)
	return s.record(sh, key, c, sub, err)
}

// record caches the result of c, the lookup of key in sh, which returned
// sub or err, and hands it to the requests waiting for c; it returns the
// answer for key. A failure is remembered for ErrorTTL, or, while the
// entry's subject may be served stale, answered with that subject. A
// lookup invalidated while it ran is not cached.
func (s *Subjects) record(sh *subjectShard, key string, c *subjectCall, sub Subject, err error) (Subject, error) {
	now := s.now()
	sh.mu.Lock()
	if sh.calls[key] == c {
		delete(sh.calls, key)
	}
	e := sh.m[key]
	switch {
	case c.invalid:
		// Invalidated while running: answer this request, remember nothing.
	case err == nil:
		if e == nil {
			e = s.insert(sh, key, now)
		}
		*e = subjectEntry{s: sub, fresh: now + int64(s.cfg.TTL), stale: now + int64(s.cfg.TTL+s.cfg.MaxStale)}
	case e != nil && e.err == nil && now < e.stale:
		e.fresh = min(now+int64(s.cfg.ErrorTTL), e.stale)
		sub, err = e.s, nil // call reported the failure
	default:
		if e == nil {
			e = s.insert(sh, key, now)
		}
		*e = subjectEntry{err: err, fresh: now + int64(s.cfg.ErrorTTL)}
	}
	c.s, c.err = sub, err
	close(c.done)
	sh.mu.Unlock()
	return sub, err
}

// call runs the lookup with the cache's timeout, turning a panic into an
// error.
func (s *Subjects) call(ctx context.Context, key string) (sub Subject, err error) {
	s.lookups.Add(1)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			sub, err = Subject{}, fmt.Errorf("subject lookup panicked: %v", p)
		}
		if err != nil {
			err = fmt.Errorf("subject lookup: %w", err)
			s.report(err)
		}
	}()
	return s.lookup(lctx, key)
}

func (s *Subjects) report(err error) {
	if err != nil && s.cfg.OnError != nil {
		s.cfg.OnError(err)
	}
}

// insert adds an empty entry for key, evicting one when the shard is full.
// The caller holds sh.mu.
func (s *Subjects) insert(sh *subjectShard, key string, now int64) *subjectEntry {
	if len(sh.m) >= sh.max {
		var victim string
		var soonest int64
		n := 0
		for k, e := range sh.m {
			if e.fresh <= now && (e.err != nil || e.stale <= now) {
				victim = k
				break
			}
			if n == 0 || e.fresh < soonest {
				victim, soonest = k, e.fresh
			}
			if n++; n == 8 {
				break
			}
		}
		delete(sh.m, victim)
	}
	e := &subjectEntry{}
	sh.m[strings.Clone(key)] = e
	return e
}

// Invalidate forgets key's subject, so the next request for it looks it up
// again: call it when the application changes a subject (a tenant upgraded,
// an override added) for the change to apply at the next request. A lookup
// already running for key is not cached.
func (s *Subjects) Invalidate(key string) {
	sh := s.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	if c := sh.calls[key]; c != nil {
		c.invalid = true
		delete(sh.calls, key)
	}
	sh.mu.Unlock()
}

// InvalidateAll forgets every subject.
func (s *Subjects) InvalidateAll() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		for k, c := range sh.calls {
			c.invalid = true
			delete(sh.calls, k)
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of keys held, expired ones included.
func (s *Subjects) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Lookups returns how many times the lookup function has been called.
func (s *Subjects) Lookups() uint64 { return s.lookups.Load() }
