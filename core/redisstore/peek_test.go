package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/redis/go-redis/v9"
)

// snapshot returns every key of the server with its serialized value and
// expiry time, to tell whether anything changed.
func snapshot(t *testing.T, c *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		v, _ := c.Dump(ctx, k).Result()
		// The absolute expiry (PEXPIRETIME), which only a write moves,
		// unlike a TTL, which a later read finds lower.
		at, _ := c.PExpireTime(ctx, k).Result()
		out = append(out, fmt.Sprintf("%s %x %d", k, v, at))
	}
	return out
}

// TestPeekReadsWithoutWriting charges one key in a budget of every
// algorithm (a sliding log whose oldest entries have left its window, a
// concurrency budget with a lease that has ended among those held), then
// peeks at it and at a key never used: each peek reports what the last
// take left (a fresh key: full budgets), and the server's keys, values and
// TTLs are exactly as before. The peek function is registered with the
// no-writes flag, so the server would refuse a write.
func TestPeekReadsWithoutWriting(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "peek:"})
	ctx := context.Background()
	day := 24 * time.Hour
	windowtest.ClearOfEdge(t, day)
	items := []core.Item{
		item("fixed", "k", fixed(10, day), 3, false),
		item("sliding", "k", sliding(10, day), 3, false),
		item("log", "k", slidingLog(10, 200*time.Millisecond), 3, false),
		item("token", "k", token(10, day, 10), 3, false),
		item("leaky", "k", leaky(10, day, 10, time.Hour), 3, false),
		item("conc", "k", conc(10, 200*time.Millisecond), 3, false),
	}
	out := make([]core.Outcome, len(items))
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the log's entries and the slot's lease end
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, client)
	peeked := make([]core.Outcome, len(items))
	if err := st.Peek(ctx, items, peeked); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if !peeked[i].Allowed || peeked[i].Charged || peeked[i].Remaining != out[i].Remaining {
			t.Errorf("%s: peek %+v; the take before it left remaining %d", items[i].Budget, peeked[i], out[i].Remaining)
		}
	}
	fresh := slices.Clone(items)
	for i := range fresh {
		fresh[i].Key = "never-used"
	}
	if err := st.Peek(ctx, fresh, peeked); err != nil {
		t.Fatal(err)
	}
	for i := range fresh {
		if want := fresh[i].Limit.Capacity(); peeked[i].Remaining != want {
			t.Errorf("%s, a key never used: remaining %d, want %d", fresh[i].Budget, peeked[i].Remaining, want)
		}
	}
	if after := snapshot(t, client); !slices.Equal(before, after) {
		t.Errorf("a peek changed the server:\nbefore %q\nafter  %q", before, after)
	}
}

// TestPeekMatchesMemory: the same takes on the memory store and on Redis
// leave states that both stores' peeks report alike.
func TestPeekMatchesMemory(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "pm:"})
	mem := memstore.MustNew(memstore.Config{SweepInterval: -1})
	defer mem.Close()
	ctx := context.Background()
	day := 24 * time.Hour
	windowtest.ClearOfEdge(t, day)
	items := []core.Item{
		item("fixed", "k", fixed(10, day), 4, false),
		item("log", "k", slidingLog(10, day), 4, false),
		item("token", "k", token(10, day, 10), 4, false),
		item("conc", "k", conc(10, time.Hour), 4, false),
	}
	out := make([]core.Outcome, len(items))
	for _, s := range []core.Store{st, mem} {
		if err := s.Take(ctx, items, out); err != nil {
			t.Fatal(err)
		}
	}
	pr, pm := make([]core.Outcome, len(items)), make([]core.Outcome, len(items))
	if err := st.Peek(ctx, items, pr); err != nil {
		t.Fatal(err)
	}
	if err := mem.Peek(ctx, items, pm); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if pr[i].Allowed != pm[i].Allowed || pr[i].Remaining != pm[i].Remaining || pr[i].Remaining != 6 {
			t.Errorf("%s: Redis %+v, memory %+v, want remaining 6", items[i].Budget, pr[i], pm[i])
		}
	}
}
