package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestEvictionKeepsActiveClients: on a full Redis with allkeys-lru, the
// store's advice, a flood of new keys evicts idle keys, not the counters
// of a client that keeps sending at its limit: its sliding log, fixed
// window, sliding window and token bucket each admit no more than their
// bounds while thousands of keys are evicted around them. (With
// volatile-ttl instead, the flood's keys, with an hour's TTL, outlive the
// client's, which go first, and every algorithm passes its bound.)
func TestEvictionKeepsActiveClients(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a Redis")
	}
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	st := mustStore(t, newClient(t, srv.Addr()), Config{Prefix: "ev:"})
	ctx := context.Background()
	const q, w = 20, 2 * time.Second
	budgets := []core.Item{
		item("log", "victim", slidingLog(q, w), 1, false),
		item("fixed", "victim", fixed(q, w), 1, false),
		item("sliding", "victim", sliding(q, w), 1, false),
		item("bucket", "victim", core.Limit{Algorithm: core.TokenBucket, Quota: q, Window: w, Burst: q}, 1, false),
	}
	admitted := map[string]int64{}
	out := make([]core.Outcome, 1)
	admin := newClient(t, srv.Addr())
	evicted := func() int {
		info, err := admin.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatalf("INFO stats has no evicted_keys:\n%s", info)
		return 0
	}
	// The client sends at its limit while new keys fill Redis, until
	// 5,000 keys were evicted and at least 3 s passed (a minute at most).
	flood, ev := 0, 0
	start := time.Now()
	for i := 0; ev < 5000 || time.Since(start) < 3*time.Second; i++ {
		if time.Since(start) > time.Minute {
			t.Fatalf("after a minute, %d flood keys and %d evicted: Redis did not fill", flood, ev)
		}
		for _, it := range budgets {
			if err := st.Take(ctx, []core.Item{it}, out); err != nil {
				t.Fatalf("victim's %s: %v", it.Budget, err)
			}
			if out[0].Allowed {
				admitted[it.Budget]++
			}
		}
		// Between two of the client's requests, 40 new keys.
		for range 40 {
			if err := st.Take(ctx, []core.Item{item("fixed", "flood-"+strconv.Itoa(flood), fixed(q, time.Hour), 1, false)}, out); err != nil {
				t.Fatalf("flood key %d: %v", flood, err)
			}
			flood++
		}
		if i%10 == 0 {
			ev = evicted()
		}
	}
	// Worst cases over the run's span L (storetest.WorstCase).
	run := time.Since(start)
	n := int64((run + w - 1) / w) // ⌈L/W⌉
	bound := map[string]int64{
		"log":     n * q,
		"fixed":   (n + 1) * q,
		"sliding": (n + 1) * q,
		"bucket":  q + int64((run-time.Microsecond)/(w/q)),
	}
	t.Logf("%v: %d flood keys, %d evicted; the client was admitted %v, bounds %v", run.Round(time.Millisecond), flood, ev, admitted, bound)
	for name, b := range bound {
		if admitted[name] > b {
			t.Errorf("%s: victim admitted %d in %v, bound %d: its counter was evicted", name, admitted[name], run, b)
		}
	}
}

// TestEvictedLogKeepsItsCount: Redis may evict a sliding log's key alone,
// keeping the partition's key that holds the budget's record (other
// budgets of the partition keep it in use). The log's units still count
// then: its record keeps them, and the store rebuilds the log as one
// entry of them all at the newest entry's time, so the client gets no
// fresh quota. Before, the log read as empty and the client got its whole
// quota again at once. A rebuilt log lets the client back in once its
// newest entry leaves the window, is stored with the next charge, and
// leaves every key under a TTL.
func TestEvictedLogKeepsItsCount(t *testing.T) {
	_, client := startServer(t)
	clock := newFakeClock(t0)
	useFakeTime(t, client, clock, 10*time.Minute)
	st := mustStore(t, client, Config{Prefix: "evlog:"})
	ctx := context.Background()
	l := slidingLog(5, time.Minute)
	at := func(s int64) { clock.set(t0 + s*1_000_000) }
	take := func(name string, cost int64, want bool) core.Outcome {
		t.Helper()
		out := make([]core.Outcome, 1)
		if err := st.Take(ctx, []core.Item{item(name, "victim", l, cost, false)}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != want {
			t.Fatalf("%s at %v, cost %d: allowed %v, want %v (remaining %d)",
				name, clock.Now().Sub(time.UnixMicro(t0)), cost, out[0].Allowed, want, out[0].Remaining)
		}
		return out[0]
	}
	evict := func(name string) {
		t.Helper()
		if n, err := client.Del(ctx, st.LogKey(name, "victim")).Result(); err != nil || n != 1 {
			t.Fatalf("DEL of %s's log key: %d keys, %v", name, n, err)
		}
	}

	// A full log, evicted: no fresh quota.
	at(0)
	take("full", 2, true)
	at(10)
	take("full", 3, true)
	evict("full")
	at(20)
	o := take("full", 1, false)
	if o.Remaining != 0 || o.RetryAfter <= 0 || o.RetryAfter > 50*time.Second {
		t.Errorf("denied with remaining %d, retry after %v; want 0 remaining and a retry within the newest entry's 50 s", o.Remaining, o.RetryAfter)
	}
	assertTTLs(t, client, "evlog:")
	clock.set(t0 + 70_000_001) // the newest entry (10 s) left the window
	take("full", 5, true)
	take("full", 1, false)

	// A log evicted with room left, then charged: the rebuilt entry is
	// stored with the new ones and leaves the window in its turn.
	at(80)
	take("room", 3, true)
	evict("room")
	at(90)
	take("room", 1, true)
	at(91)
	take("room", 1, true)
	take("room", 1, false)
	clock.set(t0 + 140_000_001) // the rebuilt entry (80 s) left
	take("room", 3, true)
	take("room", 1, false)
	assertTTLs(t, client, "evlog:")
}
