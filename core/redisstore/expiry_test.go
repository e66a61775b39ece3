package redisstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the fault tests cause many.
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// expiryLimits are one limit per algorithm with short windows, and the
// longest TTL each key may have (what its state can need).
var expiryLimits = []struct {
	l      core.Limit
	maxTTL time.Duration
}{
	{fixed(3, 200*time.Millisecond), 200 * time.Millisecond},
	{sliding(3, 150*time.Millisecond), 300 * time.Millisecond},
	{slidingLog(3, 200*time.Millisecond), 200 * time.Millisecond},
	{token(10, 200*time.Millisecond, 3), 3 * 20 * time.Millisecond},
	{leaky(10, 200*time.Millisecond, 2, 100*time.Millisecond), 2*20*time.Millisecond + 100*time.Millisecond},
}

// TestExpiry: every key has a TTL no longer than its state needs (a
// partition's key: the longest any of its budgets needs), and once the
// windows have passed no key remains.
func TestExpiry(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "exp:"})
	ctx := context.Background()
	longest := 100 * time.Millisecond
	for _, e := range expiryLimits {
		longest = max(longest, e.maxTTL)
	}
	for round := 0; round < 3; round++ {
		for i, e := range expiryLimits {
			for _, part := range []string{"a", "b c"} {
				items := []core.Item{item(fmt.Sprintf("b%d", i), part, e.l, 1, false), item("other", part, fixed(100, 100*time.Millisecond), 1, false)}
				out := make([]core.Outcome, 2)
				if err := st.Take(ctx, items, out); err != nil {
					t.Fatal(err)
				}
				if round == 0 && !out[0].Charged {
					t.Fatalf("%v: first take not charged: %+v", e.l, out[0])
				}
				if out[0].Charged {
					if err := st.Refund(ctx, items[:1], out[:1]); err != nil {
						t.Fatal(err)
					}
					if err := st.Take(ctx, items[:1], out[:1]); err != nil {
						t.Fatal(err)
					}
				}
				// The partition's key holds every budget of this loop
				// and "other" (100 ms): its TTL is at most the longest
				// any of them needs.
				checkTTL(t, client, st.Key(part), "the shared partition", longest)
				if e.l.Algorithm == core.SlidingLog {
					checkTTL(t, client, st.LogKey(items[0].Budget, part), e.l.Algorithm.String()+" log", e.maxTTL)
				}
			}
			// A partition of this budget alone: its key's TTL follows it.
			part := fmt.Sprintf("solo%d", i)
			solo := []core.Item{item("s", part, e.l, 1, false)}
			out := make([]core.Outcome, 1)
			if err := st.Take(ctx, solo, out); err != nil {
				t.Fatal(err)
			}
			if round == 0 && !out[0].Charged {
				t.Fatalf("%v: first take not charged: %+v", e.l, out[0])
			}
			checkTTL(t, client, st.Key(part), e.l.Algorithm.String()+" alone", e.maxTTL)
			if e.l.Algorithm == core.SlidingLog {
				checkTTL(t, client, st.LogKey("s", part), e.l.Algorithm.String()+" alone, log", e.maxTTL)
			}
		}
		time.Sleep(30 * time.Millisecond)
	}
	assertTTLs(t, client, "exp:")
	time.Sleep(350 * time.Millisecond) // every window (×2 for the sliding window counter)
	if keys := keysWith(t, client, "exp:"); len(keys) != 0 {
		t.Errorf("keys left after the windows passed: %v", keys)
	}
}

// checkTTL fails when key has no TTL or a TTL longer than max.
func checkTTL(t *testing.T, client redis.UniversalClient, key, what string, max time.Duration) {
	t.Helper()
	ttl, err := client.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// -2 (already expired) can happen on a slow machine; -1 (no TTL)
	// must never.
	if ttl == -1 || ttl > max+time.Millisecond {
		t.Errorf("%s (%s): PTTL %v, want at most %v", what, key, ttl, max)
	}
}

// TestRefundDeletesSpentState: refunding a token bucket's only charge
// leaves a state equivalent to an empty one, which the store deletes.
func TestRefundDeletesSpentState(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "del:"})
	ctx := context.Background()
	items := []core.Item{item("b", "k", token(1, time.Hour, 5), 1, false)}
	out := make([]core.Outcome, 1)
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, st.Key("k")).Val(); n != 1 {
		t.Fatal("no key after a charge")
	}
	if err := st.Refund(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, st.Key("k")).Val(); n != 0 {
		t.Error("key kept after its only charge was refunded")
	}
}

// TestTTLAfterFaults: with calls timing out while Redis is paused (their
// scripts run later) and decisions cancelled mid-flight, no key is ever
// without a TTL.
func TestTTLAfterFaults(t *testing.T) {
	srv, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "fault:", Timeout: 5 * time.Millisecond})
	// Every partition's records exist before the faults, written within a
	// deadline load cannot miss: on a loaded machine every 5ms call may
	// time out before it is sent, and the check below must still have
	// records to look at, those the faulted calls rewrote or left alone.
	seed := mustStore(t, client, Config{Prefix: "fault:", Timeout: 10 * time.Second})
	for p := range 20 {
		part := fmt.Sprintf("p%d", p)
		for i := range 5 {
			items := []core.Item{
				item("x", part, expiryLimits[i].l, 1, false),
				item("y", part, expiryLimits[(i+2)%5].l, 1, false),
				item("z", part, slidingLog(50, time.Second), 1, i%2 == 0),
				item("w", part, fixed(1e6, time.Hour), 1, false), // outlives the test
			}
			if err := seed.Take(context.Background(), items, make([]core.Outcome, 4)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stop atomic.Bool
	var timeouts atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			out := make([]core.Outcome, 4)
			for i := 0; !stop.Load(); i++ {
				part := fmt.Sprintf("p%d", i%20)
				items := []core.Item{
					item("x", part, expiryLimits[i%5].l, 1, false),
					item("y", part, expiryLimits[(i+2)%5].l, 1, false),
					item("z", part, slidingLog(50, time.Second), 1, w%2 == 0),
					item("w", part, fixed(1e6, time.Hour), 1, false),
				}
				if err := st.Take(context.Background(), items, out); err != nil {
					timeouts.Add(1)
					continue
				}
				if i%3 == 0 {
					_ = st.Refund(context.Background(), items, out)
				}
			}
		}(w)
	}
	for i := 0; i < 5; i++ {
		time.Sleep(30 * time.Millisecond)
		srv.CLI("CLIENT", "PAUSE", "40", "ALL")
	}
	time.Sleep(60 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if timeouts.Load() == 0 {
		t.Error("no call timed out; the fault was not injected")
	}
	if n := assertTTLs(t, client, "fault:"); n == 0 {
		t.Error("no keys to check")
	}
	// The keys are the store's own: nothing else was written.
	for _, k := range keysWith(t, client, "fault:") {
		if !strings.HasPrefix(k, "fault:{p") {
			t.Errorf("unexpected key %q", k)
		}
	}
}
