package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/windowtest"
)

// TestManyRecordsPastOneCall: a partition holding more records than the
// scripts unpack and pack in one call keeps every one of them, including
// past the 1600 or so records that one Lua call could not hold at all. With quota 1 per hour per budget, once
// every budget is charged, every budget asked again is denied, a refund
// gives back exactly the refunded budget, and a new budget joins without
// disturbing the others.
func TestManyRecordsPastOneCall(t *testing.T) {
	_, client := startServer(t)
	clock := newFakeClock(t0)
	useFakeTime(t, client, clock, 10*time.Minute) // the fake clock stands still
	st := mustStore(t, client, Config{Prefix: "big:"})
	ctx := context.Background()
	l := fixed(1, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	for _, n := range []int{1000, 1001, 2000} {
		part := fmt.Sprintf("tenant:%d", n)
		name := func(i int) string { return fmt.Sprintf("endpoint_%04d", i) }
		take := func(i int) core.Outcome {
			t.Helper()
			out := make([]core.Outcome, 1)
			if err := st.Take(ctx, []core.Item{item(name(i), part, l, 1, false)}, out); err != nil {
				t.Fatal(err)
			}
			return out[0]
		}
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
		// Every budget in the first and last 40, and every 37th.
		sample := func(i int) bool { return i < 40 || i >= n-40 || i%37 == 0 }
		admitted := 0
		for i := 0; i < n; i++ {
			if sample(i) && take(i).Allowed {
				admitted++
			}
		}
		if admitted != 0 {
			t.Errorf("%d budgets on one partition, each charged its quota of 1: %d sampled second requests admitted, want 0", n, admitted)
		}
		// Refund the last budget; only it admits again.
		o := take(n - 1)
		if o.Allowed {
			t.Fatalf("%d budgets: %s allowed before its refund", n, name(n-1))
		}
		first := make([]core.Outcome, 1)
		first[0] = core.Outcome{Allowed: true, Charged: true, Stamp: o.Stamp, Reset: o.Reset}
		if err := st.Refund(ctx, []core.Item{item(name(n-1), part, l, 1, false)}, first); err != nil {
			t.Fatal(err)
		}
		if !take(n - 1).Charged {
			t.Errorf("%d budgets: %s not admitted after its refund", n, name(n-1))
		}
		// A new budget joins.
		if !take(n).Charged {
			t.Errorf("%d budgets: a new budget %s not admitted", n, name(n))
		}
		for i := 0; i <= n; i++ {
			if sample(i) && take(i).Allowed {
				t.Errorf("%d budgets: %s admitted a second time after the partition grew to %d", n, name(i), n+1)
			}
		}
	}
	assertTTLs(t, client, "big:")
}
