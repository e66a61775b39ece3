package core_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

func TestPeekReadsWithoutWriting(t *testing.T) {
	clk := newFakeClock(t0)
	store := newStore(t, clk)
	tiers := map[string]int64{"gold": 50}
	eng := core.MustNew(core.Config{
		Store: store, Clock: clk, FailureMode: core.FailClosed,
		Budgets: []core.Budget{
			{Name: "fixed", Quota: 5, Window: time.Minute, Key: remoteAddrKey, KeyClass: "ip"},
			{Name: "bucket", Algorithm: core.TokenBucket, Quota: 10, Window: 10 * time.Second, Key: remoteAddrKey, FailureMode: core.FailOpen},
			{Name: "log", Algorithm: core.SlidingLog, Quota: 3, Window: time.Minute, Key: remoteAddrKey},
			{Name: "tiered", Quota: 7, Window: time.Minute, Key: remoteAddrKey,
				QuotaFunc: func(_ *core.Request, key string) (int64, error) {
					if q, ok := tiers[key]; ok {
						return q, nil
					}
					return 0, errors.New("unknown tenant")
				}},
		},
	})
	l := eng.MustLayer(core.Use("fixed", "bucket", "log", "tiered"))
	eng.MustLayer(core.Use("fixed"), core.CostFrom(func(*core.Request) (int64, error) { return 1, nil }), core.Skip(func(*core.Request) bool { return false }))

	for range 2 {
		var d core.Decision
		l.Decide(&core.Request{Method: "GET", RemoteAddr: "gold"}, &d)
		if !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
	}
	entries := store.Len()

	got, err := eng.Peek(context.Background(), "gold")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]core.PeekResult{}
	for _, p := range got {
		byName[p.Budget] = p
	}
	want := map[string]int64{"fixed": 3, "bucket": 8, "log": 1, "tiered": 48}
	for name, rem := range want {
		p, ok := byName[name]
		if !ok {
			t.Fatalf("no result for %s in %+v", name, got)
		}
		if p.Remaining != rem || p.Charged || !p.Allowed || p.Cost != 0 {
			t.Errorf("%s: %+v, want remaining %d, nothing charged", name, p, rem)
		}
	}
	if q := byName["tiered"].Limit.Quota; q != 50 {
		t.Errorf("tiered resolved quota %d, want 50", q)
	}
	if r := byName["fixed"].Reset; r != time.Minute {
		t.Errorf("fixed reset %v, want 1m", r)
	}

	// A key never seen: full budgets, no entry created; the resolver's
	// error is reported and the static quota used.
	fresh, err := eng.Peek(context.Background(), "stranger", "tiered", "fixed")
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh) != 2 || fresh[0].Budget != "tiered" || fresh[0].QuotaErr == nil || fresh[0].Remaining != 7 || fresh[1].Remaining != 5 {
		t.Errorf("fresh key: %+v", fresh)
	}
	if n := store.Len(); n != entries {
		t.Errorf("peeking changed the store's entries: %d, then %d", entries, n)
	}
	// Peeking charged nothing: the next decisions see the same counts.
	allowed := 0
	for range 3 {
		var d core.Decision
		l.Decide(&core.Request{Method: "GET", RemoteAddr: "gold"}, &d)
		if d.Allowed {
			allowed++
		}
	}
	after, _ := eng.Peek(context.Background(), "gold", "fixed", "log")
	if allowed != 1 || after[0].Remaining != 2 || after[1].Remaining != 0 {
		t.Errorf("3 more: %d allowed (want 1: log holds 3), then fixed %d (want 2), log %d (want 0)", allowed, after[0].Remaining, after[1].Remaining)
	}

	if _, err := eng.Peek(context.Background(), "gold", "nope"); err == nil {
		t.Error("peek of an unknown budget: no error")
	}
	if _, err := eng.Peek(context.Background(), "gold", "fixed", "fixed"); err == nil {
		t.Error("peek naming a budget twice: no error")
	}

	budgets := eng.Budgets()
	names := []string{}
	for _, b := range budgets {
		names = append(names, b.Name)
	}
	if !slices.Equal(names, []string{"bucket", "fixed", "log", "tiered"}) {
		t.Errorf("budgets %v", names)
	}
	if budgets[1].FailureMode != core.FailClosed || budgets[0].FailureMode != core.FailOpen || budgets[1].KeyClass != "ip" || budgets[0].KeyClass != "custom" {
		t.Errorf("budgets: %+v", budgets)
	}
	layers := eng.Layers()
	if len(layers) != 2 || !slices.Equal(layers[0].Budgets, []string{"fixed", "bucket", "log", "tiered"}) ||
		!slices.Equal(layers[0].Costs, []int64{1, 1, 1, 1}) || layers[0].Skips ||
		!slices.Equal(layers[1].Costs, []int64{-1}) || !layers[1].Skips {
		t.Errorf("layers: %+v", layers)
	}
}
