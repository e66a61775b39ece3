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
