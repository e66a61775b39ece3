package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/windowtest"
)

// Tests of the one-key-per-partition layout: every budget of a partition
// keeps a record in <prefix>{<partition>}, a sliding log keeps its entries
// in <prefix>{<partition>}:<budget>.

// TestLayoutManyBudgetsOnePartition: every record of a partition survives
// however many budgets share that partition (a tenant or a client IP keys
// every budget of an API, and the engines of several services may share
// one prefix). With quota 1 per hour per budget, once every budget has
// been charged, a second request to any of them is denied.
func TestLayoutManyBudgetsOnePartition(t *testing.T) {
	_, client := startServer(t)
	clock := newFakeClock(t0)
	useFakeTime(t, client, clock, 10*time.Minute) // the fake clock stands still
	st := mustStore(t, client, Config{Prefix: "many:"})
	ctx := context.Background()
	l := fixed(1, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	for _, n := range []int{255, 256, 300} {
		part := fmt.Sprintf("tenant:%d", n)
		name := func(i int) string { return fmt.Sprintf("endpoint_%03d", i) }
		// Charge every budget once, up to maxItems budgets per take.
		for i := 0; i < n; i += maxItems {
			var items []core.Item
			for j := i; j < min(n, i+maxItems); j++ {
				items = append(items, item(name(j), part, l, 1, false))
			}
			out := make([]core.Outcome, len(items))
			if err := st.Take(ctx, items, out); err != nil {
				t.Fatal(err)
			}
			for j := range out {
				if !out[j].Charged {
					t.Fatalf("%d budgets: first charge of %s not charged: %+v", n, items[j].Budget, out[j])
				}
			}
		}
		admitted := 0
		for i := 0; i < n; i++ {
			out := make([]core.Outcome, 1)
			if err := st.Take(ctx, []core.Item{item(name(i), part, l, 1, false)}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				admitted++
			}
		}
		if admitted != 0 {
			t.Errorf("%d budgets on one partition, quota 1 per hour, each already charged: %d second requests admitted, want 0", n, admitted)
		}
	}
}

// TestLayoutSharedKeyTTLCoversEveryRecord: a partition's key lives at
// least as long as the longest-lived of its records needs, through every
// way its TTL is written: a longer record joining (SET PX), a shorter one
// rewritten within its window (KEEPTTL), the longest record refunded
// (the TTL shrinks to the next one, and no further), the shorter records
// expiring and being dropped. TestExpiry checks upper bounds in real time;
// this checks lower bounds with an injected clock (no TTL floor), and that
// the long-lived states are still counted after each rewrite.
func TestLayoutSharedKeyTTLCoversEveryRecord(t *testing.T) {
	_, client := startServer(t)
	clock := newFakeClock(t0 + 123_456)
	useFakeTime(t, client, clock, 0)
	st := mustStore(t, client, Config{Prefix: "ttlcov:"})
	ctx := context.Background()
	const part = "tenant:7"
	key, logKey := st.Key(part), st.LogKey("log", part)

	short := fixed(5, time.Second)
	long := fixed(100, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	tok := token(10, time.Hour, 10) // one unit per 6 minutes
	lg := slidingLog(3, 2*time.Hour)

	deadline := map[string]int64{} // each record's expiry, µs (fake time)
	take := func(budget string, l core.Limit, cost int64, wantCharged bool) core.Outcome {
		t.Helper()
		out := make([]core.Outcome, 1)
		if err := st.Take(ctx, []core.Item{item(budget, part, l, cost, false)}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Charged != wantCharged {
			t.Fatalf("at +%dµs: %s cost %d: %+v, want charged %v", clock.micros()-t0, budget, cost, out[0], wantCharged)
		}
		if out[0].Charged {
			deadline[budget] = out[0].Stamp + out[0].Reset.Microseconds()
		}
		return out[0]
	}
	// atLeast fails unless k has a TTL covering until µs (fake time),
	// less a second for the real time this test takes. Every need below is
	// minutes or hours, so a TTL set for a shorter record fails clearly.
	atLeast := func(step, k string, until int64) {
		t.Helper()
		need := time.Duration(until-clock.micros()) * time.Microsecond
		ttl, err := client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 || ttl < need-time.Second {
			t.Errorf("%s: %s has PTTL %v; a record in it needs %v", step, k, ttl, need)
		}
	}
	longest := func() int64 {
		m := int64(0)
		for _, d := range deadline {
			m = max(m, d)
		}
		return m
	}

	take("short", short, 1, true)
	atLeast("short alone", key, longest())

	// A longer-lived record joins: the TTL grows to it.
	take("long", long, 100, true)
	atLeast("long joins", key, longest())

	// The short window turns over; its record is rewritten while the
	// long one sets the key's expiry (KEEPTTL).
	clock.add(1_500_000)
	take("short", short, 1, true)
	atLeast("short rewritten", key, longest())
	take("long", long, 1, false) // still spent

	// A token bucket pushes its TAT past every other record.
	o := take("tok", tok, 10, true)
	atLeast("token bucket joins", key, longest())
	// Refunded at once: its state is empty again and its record dropped;
	// the TTL shrinks to the long window's end, no further and no less.
	if err := st.Refund(ctx, []core.Item{item("tok", part, tok, 10, false)}, []core.Outcome{o}); err != nil {
		t.Fatal(err)
	}
	delete(deadline, "tok")
	atLeast("token bucket refunded", key, longest())
	if ttl, _ := client.PTTL(ctx, key).Result(); ttl > time.Duration(longest()-clock.micros())*time.Microsecond+time.Millisecond {
		t.Errorf("after the refund: PTTL %v, longer than the longest record needs (%v)", ttl, time.Duration(longest()-clock.micros())*time.Microsecond)
	}
	take("long", long, 1, false)
	take("tok", tok, 10, true) // the refund gave the bucket back

	// A sliding log: its record in the key, its entries in its own key.
	take("log", lg, 1, true)
	atLeast("log joins", key, longest())
	atLeast("log joins", logKey, deadline["log"])

	// An hour later the long window and the short one have passed, and
	// so has the bucket's TAT; a write drops their records; the log's
	// record and entries stay.
	clock.add(int64(time.Hour/time.Microsecond) + 1_000_000)
	delete(deadline, "short")
	delete(deadline, "long")
	delete(deadline, "tok")
	take("short", short, 1, true)
	atLeast("after an hour", key, longest())
	atLeast("after an hour", logKey, deadline["log"])
	take("long", long, 100, true) // a new window
	take("log", lg, 2, true)
	take("log", lg, 1, false) // 3 of 3 within two hours
	atLeast("log full", key, longest())
	atLeast("log full", logKey, deadline["log"])
	assertTTLs(t, client, "ttlcov:")
}

// TestLayoutHashedRecordNames: budget names that are long or hold bytes
// other than printable ASCII (non-ASCII names, a NUL byte) get hashed
// record names in the partition's key; each is still a budget of its own,
// counted, refunded, and a sliding log of such a name keeps its entries
// under its raw name. No other test uses such names.
func TestLayoutHashedRecordNames(t *testing.T) {
	_, client := startServer(t)
	clock := newFakeClock(t0)
	useFakeTime(t, client, clock, 10*time.Minute)
	st := mustStore(t, client, Config{Prefix: "names:"})
	ctx := context.Background()
	const part = "ip:192.0.2.1"
	names := []string{
		"envoi_é", "envoi_è", // hashed, differ in their last byte
		"संदेश",
		strings.Repeat("n", 128),       // the longest raw name
		strings.Repeat("n", 129),       // hashed
		strings.Repeat("n", 129) + "x", // hashed, share 129 bytes with the one before
		strings.Repeat("n", 129) + "y",
		"a\x00b", "a\x00c", // NUL ends a raw name in the record: hashed
		"plain",
	}
	l := fixed(1, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	items := make([]core.Item, 0, len(names)+1)
	for _, n := range names {
		items = append(items, item(n, part, l, 1, false))
	}
	logName := "लॉग"
	items = append(items, item(logName, part, slidingLog(1, time.Hour), 1, false))
	out := make([]core.Outcome, len(items))
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if !out[i].Charged || out[i].Remaining != 0 {
			t.Fatalf("%q: first take %+v, want charged with 0 left (another name's record?)", items[i].Budget, out[i])
		}
	}
	if n, _ := client.Exists(ctx, st.LogKey(logName, part)).Result(); n != 1 {
		t.Errorf("the sliding log of %q is not at %q", logName, st.LogKey(logName, part))
	}
	for i := range items {
		o := make([]core.Outcome, 1)
		if err := st.Take(ctx, items[i:i+1], o); err != nil {
			t.Fatal(err)
		}
		if o[0].Allowed {
			t.Errorf("%q: second take allowed: %+v", items[i].Budget, o[0])
		}
	}
	// Refund two hashed names (one a sliding log): those two, and only
	// those, admit again.
	refunded := map[int]bool{1: true, len(items) - 1: true}
	ri := []core.Item{items[1], items[len(items)-1]}
	ro := []core.Outcome{out[1], out[len(items)-1]}
	if err := st.Refund(ctx, ri, ro); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		o := make([]core.Outcome, 1)
		if err := st.Take(ctx, items[i:i+1], o); err != nil {
			t.Fatal(err)
		}
		if o[0].Allowed != refunded[i] {
			t.Errorf("%q after refunding %q and %q: allowed %v, want %v", items[i].Budget, ri[0].Budget, ri[1].Budget, o[0].Allowed, refunded[i])
		}
	}
	assertTTLs(t, client, "names:")
}
