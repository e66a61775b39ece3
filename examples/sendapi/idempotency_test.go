package sendapi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestIdempotencyStores runs the same checks on the memory store and on a
// real Redis server.
func TestIdempotencyStores(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		idempotencyConformance(t, func(t *testing.T) IdempotencyStore { return NewMemoryIdempotency(0) })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { client.Close() })
		idempotencyConformance(t, func(t *testing.T) IdempotencyStore {
			// A prefix per subtest: an empty store.
			return NewRedisIdempotency(client, "test:"+t.Name()+":")
		})
	})
}

func idempotencyConformance(t *testing.T, newStore func(t *testing.T) IdempotencyStore) {
	ctx := context.Background()
	begin := func(t *testing.T, s IdempotencyStore, key, fp string, lock time.Duration) (*Record, string) {
		t.Helper()
		rec, token, err := s.Begin(ctx, key, fp, lock)
		if err != nil {
			t.Fatal(err)
		}
		if (rec == nil) == (token == "") {
			t.Fatalf("Begin(%q) = %+v, token %q: want a record or a token", key, rec, token)
		}
		return rec, token
	}

	t.Run("claim complete replay", func(t *testing.T) {
		s := newStore(t)
		rec, token := begin(t, s, "k", "fp1", time.Minute)
		if rec != nil {
			t.Fatalf("fresh key has a record: %+v", rec)
		}
		// While the first request runs, the key is pending.
		rec, _ = begin(t, s, "k", "fp1", time.Minute)
		if rec == nil || !rec.Pending || rec.Fingerprint != "fp1" || rec.Token != "" {
			t.Fatalf("in flight: %+v, want pending fp1 without its token", rec)
		}
		ok, err := s.Complete(ctx, "k", token, Record{Fingerprint: "fp1", Status: 202, Body: []byte(`{"id":"m1"}`)}, time.Minute)
		if err != nil || !ok {
			t.Fatalf("Complete = %v, %v", ok, err)
		}
		for range 2 {
			rec, _ = begin(t, s, "k", "fp1", time.Minute)
			if rec == nil || rec.Pending || rec.Status != 202 || string(rec.Body) != `{"id":"m1"}` || rec.Fingerprint != "fp1" {
				t.Fatalf("completed: %+v", rec)
			}
		}
		// Another key is independent.
		if rec, _ := begin(t, s, "k2", "fp1", time.Minute); rec != nil {
			t.Fatalf("other key: %+v", rec)
		}
	})

	t.Run("release", func(t *testing.T) {
		s := newStore(t)
		_, token := begin(t, s, "k", "fp1", time.Minute)
		// Someone else's token releases nothing.
		if err := s.Release(ctx, "k", "not-the-token"); err != nil {
			t.Fatal(err)
		}
		if rec, _ := begin(t, s, "k", "fp1", time.Minute); rec == nil || !rec.Pending {
			t.Fatalf("after a foreign release: %+v, want still pending", rec)
		}
		if err := s.Release(ctx, "k", token); err != nil {
			t.Fatal(err)
		}
		rec, token2 := begin(t, s, "k", "fp2", time.Minute)
		if rec != nil || token2 == token {
			t.Fatalf("after release: %+v, token %q; want a new claim", rec, token2)
		}
		// A released claim cannot complete over the new claim.
		if ok, err := s.Complete(ctx, "k", token, Record{Fingerprint: "fp1", Status: 202}, time.Minute); err != nil || ok {
			t.Fatalf("stale Complete = %v, %v; want false", ok, err)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		s := newStore(t)
		_, token := begin(t, s, "k", "fp1", 50*time.Millisecond)
		time.Sleep(120 * time.Millisecond)
		// The claim expired: the key is free again.
		rec, token2 := begin(t, s, "k", "fp1", time.Minute)
		if rec != nil {
			t.Fatalf("expired claim still held: %+v", rec)
		}
		if ok, _ := s.Complete(ctx, "k", token, Record{Fingerprint: "fp1", Status: 202}, time.Minute); ok {
			t.Fatal("an expired claim completed over a new one")
		}
		if ok, err := s.Complete(ctx, "k", token2, Record{Fingerprint: "fp1", Status: 202, Body: []byte("{}")}, 50*time.Millisecond); err != nil || !ok {
			t.Fatalf("Complete = %v, %v", ok, err)
		}
		time.Sleep(120 * time.Millisecond)
		if rec, _ := begin(t, s, "k", "fp1", time.Minute); rec != nil {
			t.Fatalf("expired record still replayed: %+v", rec)
		}
	})

	t.Run("one claim among concurrent requests", func(t *testing.T) {
		s := newStore(t)
		var (
			mu     sync.Mutex
			claims int
			wg     sync.WaitGroup
		)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, _, err := s.Begin(ctx, "k", "fp", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if rec == nil {
					mu.Lock()
					claims++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if claims != 1 {
			t.Fatalf("%d of 16 concurrent requests claimed the key, want 1", claims)
		}
	})
}

func TestMemoryIdempotencyBounded(t *testing.T) {
	ctx := context.Background()
	m := NewMemoryIdempotency(2)
	now := time.Unix(1_000_000, 0)
	m.now = func() time.Time { return now }
	for _, k := range []string{"a", "b"} {
		if _, _, err := m.Begin(ctx, k, "fp", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Begin(ctx, "c", "fp", time.Minute); !errors.Is(err, ErrIdempotencyFull) {
		t.Fatalf("third key in a store of 2: %v, want ErrIdempotencyFull", err)
	}
	now = now.Add(2 * time.Minute) // a and b expire
	if _, _, err := m.Begin(ctx, "c", "fp", time.Minute); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1 (expired entries dropped)", n)
	}
}

func TestScopeKey(t *testing.T) {
	if scopeKey("acme", "k") == scopeKey("globex", "k") {
		t.Fatal("two organisations share an idempotency key")
	}
	if scopeKey("a", "b\x00c") == scopeKey("a\x00b", "c") {
		t.Fatal("scope keys collide")
	}
	if fingerprint(RouteEmail, []byte("{}")) == fingerprint(RouteSMS, []byte("{}")) {
		t.Fatal("the route is not part of the fingerprint")
	}
}
