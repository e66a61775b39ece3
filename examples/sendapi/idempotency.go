package sendapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/redis/go-redis/v9"
)

// HeaderIdempotencyKey is the request header naming an idempotent send.
const HeaderIdempotencyKey = "Idempotency-Key"

// HeaderReplayed marks a response replayed for a completed idempotency
// key: "Idempotent-Replayed: true". A first completion does not carry it.
const HeaderReplayed = "Idempotent-Replayed"

// MaxIdempotencyKeyLen is the longest idempotency key accepted, in bytes.
const MaxIdempotencyKeyLen = 255

// Errors of ParseIdempotencyKey.
var (
	ErrAmbiguousIdempotencyKey = errors.New("several Idempotency-Key field lines")
	ErrMalformedIdempotencyKey = fmt.Errorf("Idempotency-Key must be 1 to %d visible ASCII characters, bare or as a quoted string", MaxIdempotencyKeyLen)
)

// ParseIdempotencyKey returns the idempotency key of a request from its
// Idempotency-Key field lines: "" when there is none. The value may be an
// RFC 9651 sf-string, as draft-ietf-httpapi-idempotency-key-header writes
// it ("\"8e03978e-40d5\""), or the bare key many clients send
// (8e03978e-40d5). Either way the key is 1 to MaxIdempotencyKeyLen visible
// ASCII characters (no space); the two forms of one key are the same key.
func ParseIdempotencyKey(lines []string) (string, error) {
	switch len(lines) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", ErrAmbiguousIdempotencyKey
	}
	v := trimOWS(lines[0])
	if strings.HasPrefix(v, `"`) {
		it, err := httpsfv.UnmarshalItem([]string{v})
		if err != nil {
			return "", ErrMalformedIdempotencyKey
		}
		s, ok := it.Value.(string)
		if !ok || (it.Params != nil && len(it.Params.Names()) > 0) {
			return "", ErrMalformedIdempotencyKey
		}
		v = s
	}
	if v == "" || len(v) > MaxIdempotencyKeyLen {
		return "", ErrMalformedIdempotencyKey
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return "", ErrMalformedIdempotencyKey
		}
	}
	return v, nil
}

// Record is what an idempotency store holds for a key: a request in
// flight (Pending) or the response of a completed one.
type Record struct {
	// Fingerprint identifies the request the key was first used with
	// (its route and body); a reuse with another request is refused.
	Fingerprint string `json:"fp"`
	// Pending reports that the first request is still being served.
	Pending bool `json:"pending,omitempty"`
	// Token identifies the holder of a pending record.
	Token string `json:"token,omitempty"`
	// Status and Body are the completed response.
	Status int    `json:"status,omitempty"`
	Body   []byte `json:"body,omitempty"`
}

// IdempotencyStore remembers idempotency keys. Keys given to it are
// already scoped (by organisation) and hashed.
type IdempotencyStore interface {
	// Begin claims key for a request with fingerprint fp, for at most
	// lock. When the key is free it records a pending claim and returns
	// (nil, token, nil); otherwise it returns the existing record and
	// claims nothing.
	Begin(ctx context.Context, key, fp string, lock time.Duration) (*Record, string, error)
	// Complete replaces the claim token holds with the completed response
	// rec, kept for ttl. It reports false, storing nothing, when the key
	// is held by another claim.
	Complete(ctx context.Context, key, token string, rec Record, ttl time.Duration) (bool, error)
	// Release drops the claim token holds, so the key can be used again
	// (the request was not completed).
	Release(ctx context.Context, key, token string) error
}

// newToken returns a random claim token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported systems
	return hex.EncodeToString(b[:])
}

// scopeKey is the store key of an idempotency key used by an
// organisation: a hash, so that client-chosen bytes never become store
// keys and equal keys of two organisations never meet.
func scopeKey(org, key string) string {
	// Length-prefixed, so that no two (org, key) pairs share an input.
	s := sha256.Sum256([]byte(strconv.Itoa(len(org)) + ":" + org + key))
	return hex.EncodeToString(s[:])
}

// fingerprint identifies a request for idempotency: its route and body.
func fingerprint(route string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(route))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// DefaultMemoryIdempotencyEntries caps a MemoryIdempotency without a size.
const DefaultMemoryIdempotencyEntries = 100_000

// ErrIdempotencyFull is returned by a full MemoryIdempotency: every entry
// is live, so a new key cannot be remembered.
var ErrIdempotencyFull = errors.New("idempotency store is full")

// MemoryIdempotency is an IdempotencyStore in this process, for a single
// instance. It holds at most its size in keys, expired ones are dropped
// when room is needed.
type MemoryIdempotency struct {
	mu      sync.Mutex
	max     int
	entries map[string]memEntry
	now     func() time.Time
}

type memEntry struct {
	rec     Record
	expires time.Time
}

// NewMemoryIdempotency returns a memory store holding at most max keys
// (DefaultMemoryIdempotencyEntries when max <= 0).
func NewMemoryIdempotency(max int) *MemoryIdempotency {
	if max <= 0 {
		max = DefaultMemoryIdempotencyEntries
	}
	return &MemoryIdempotency{max: max, entries: map[string]memEntry{}, now: time.Now}
}

// get returns the live entry of key; the caller holds mu.
func (m *MemoryIdempotency) get(key string, now time.Time) (memEntry, bool) {
	e, ok := m.entries[key]
	if ok && !now.Before(e.expires) {
		delete(m.entries, key)
		return memEntry{}, false
	}
	return e, ok
}

// Begin implements IdempotencyStore.
func (m *MemoryIdempotency) Begin(_ context.Context, key, fp string, lock time.Duration) (*Record, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.get(key, now); ok {
		rec := e.rec
		rec.Token = ""
		return &rec, "", nil
	}
	if len(m.entries) >= m.max {
		for k, e := range m.entries {
			if !now.Before(e.expires) {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= m.max {
			return nil, "", ErrIdempotencyFull
		}
	}
	token := newToken()
	m.entries[key] = memEntry{rec: Record{Fingerprint: fp, Pending: true, Token: token}, expires: now.Add(lock)}
	return nil, token, nil
}

// Complete implements IdempotencyStore.
func (m *MemoryIdempotency) Complete(_ context.Context, key, token string, rec Record, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.get(key, now); ok && (!e.rec.Pending || e.rec.Token != token) {
		return false, nil
	}
	rec.Pending, rec.Token = false, ""
	rec.Body = append([]byte(nil), rec.Body...)
	m.entries[key] = memEntry{rec: rec, expires: now.Add(ttl)}
	return true, nil
}

// Release implements IdempotencyStore.
func (m *MemoryIdempotency) Release(_ context.Context, key, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.get(key, m.now()); ok && e.rec.Pending && e.rec.Token == token {
		delete(m.entries, key)
	}
	return nil
}

// Len returns the number of keys held, expired ones included.
func (m *MemoryIdempotency) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// RedisIdempotency is an IdempotencyStore in Redis, shared by every
// instance using the same server and prefix: a key completed on one
// instance replays on all. Each operation is one script run on one key,
// so it works on Redis Cluster too. Keys expire with their record.
type RedisIdempotency struct {
	client redis.UniversalClient
	prefix string
}

// DefaultIdempotencyPrefix starts the Redis keys of idempotency records.
const DefaultIdempotencyPrefix = "sendapi:idem:"

// NewRedisIdempotency returns a Redis idempotency store whose keys start
// with prefix (DefaultIdempotencyPrefix when empty).
func NewRedisIdempotency(client redis.UniversalClient, prefix string) *RedisIdempotency {
	if prefix == "" {
		prefix = DefaultIdempotencyPrefix
	}
	return &RedisIdempotency{client: client, prefix: prefix}
}

// Begin: return the record, or claim the key with a pending one.
var beginScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
`)

// Complete: replace our own claim (or a claim that expired) by the record.
var completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`)

// Release: drop our own claim.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

func millis(d time.Duration) int64 { return max(1, d.Milliseconds()) }

// Begin implements IdempotencyStore. The claim token is the pending
// record's encoding, which holds a random token.
func (s *RedisIdempotency) Begin(ctx context.Context, key, fp string, lock time.Duration) (*Record, string, error) {
	pending, _ := json.Marshal(Record{Fingerprint: fp, Pending: true, Token: newToken()})
	v, err := beginScript.Run(ctx, s.client, []string{s.prefix + key}, pending, millis(lock)).Text()
	if errors.Is(err, redis.Nil) {
		return nil, string(pending), nil
	}
	if err != nil {
		return nil, "", err
	}
	var rec Record
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return nil, "", fmt.Errorf("idempotency record: %w", err)
	}
	rec.Token = ""
	return &rec, "", nil
}

// Complete implements IdempotencyStore.
func (s *RedisIdempotency) Complete(ctx context.Context, key, token string, rec Record, ttl time.Duration) (bool, error) {
	rec.Pending, rec.Token = false, ""
	done, _ := json.Marshal(rec)
	n, err := completeScript.Run(ctx, s.client, []string{s.prefix + key}, token, done, millis(ttl)).Int()
	return n == 1, err
}

// Release implements IdempotencyStore.
func (s *RedisIdempotency) Release(ctx context.Context, key, token string) error {
	return releaseScript.Run(ctx, s.client, []string{s.prefix + key}, token).Err()
}
