package core_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// span is 2^50 µs, the longest window, bucket span and shaping wait.
const span = time.Duration(1<<50) * time.Microsecond

func TestLimitValidate(t *testing.T) {
	cases := []struct {
		name string
		l    core.Limit
		want string // "" for valid
	}{
		{"fixed", core.Limit{Quota: 1, Window: time.Millisecond}, ""},
		{"unknown algorithm", core.Limit{Algorithm: core.Concurrency + 1, Quota: 1, Window: time.Second}, "unknown algorithm 6"},
		{"negative algorithm", core.Limit{Algorithm: -1, Quota: 1, Window: time.Second}, "unknown algorithm -1"},
		{"zero quota", core.Limit{Quota: 0, Window: time.Second}, "quota 0 is not positive"},
		{"max quota", core.Limit{Quota: core.MaxQuota, Window: time.Second}, ""},
		{"quota past max", core.Limit{Quota: core.MaxQuota + 1, Window: time.Second}, "quota 1000000000000000 exceeds 999999999999999"},
		{"zero window", core.Limit{Quota: 1}, "window 0s is not positive"},
		{"sub-millisecond window", core.Limit{Quota: 1, Window: 999 * time.Microsecond}, "not a whole number of milliseconds"},
		{"fractional window", core.Limit{Quota: 1, Window: 1001 * time.Microsecond}, "not a whole number of milliseconds"},
		{"longest window", core.Limit{Quota: 1, Window: span / time.Millisecond * time.Millisecond}, ""},
		{"window past 2^50", core.Limit{Quota: 1, Window: (span/time.Millisecond + 1) * time.Millisecond}, "exceeds 2^50 µs"},
		{"sliding at 2^53", core.Limit{Algorithm: core.SlidingWindow, Quota: 1 << 42, Window: 1024 * time.Millisecond}, ""},
		{"sliding past 2^53", core.Limit{Algorithm: core.SlidingWindow, Quota: 1<<42 + 1, Window: 1024 * time.Millisecond}, "too large for the sliding window counter"},
		{"log at max", core.Limit{Algorithm: core.SlidingLog, Quota: core.MaxSlidingLogQuota, Window: time.Second}, ""},
		{"log past max", core.Limit{Algorithm: core.SlidingLog, Quota: core.MaxSlidingLogQuota + 1, Window: time.Second}, "the largest a sliding log keeps"},
		{"bucket one per µs", core.Limit{Algorithm: core.TokenBucket, Quota: 1000, Window: time.Millisecond, Burst: 1}, ""},
		{"bucket faster than 1/µs", core.Limit{Algorithm: core.TokenBucket, Quota: 1001, Window: time.Millisecond, Burst: 1}, "more than one unit per microsecond"},
		{"bucket no burst", core.Limit{Algorithm: core.TokenBucket, Quota: 1, Window: time.Second}, "burst 0 is out of range"},
		{"bucket burst past max", core.Limit{Algorithm: core.TokenBucket, Quota: 1000, Window: time.Millisecond, Burst: core.MaxQuota + 1}, "out of range"},
		{"bucket span at 2^50", core.Limit{Algorithm: core.TokenBucket, Quota: 500, Window: time.Millisecond, Burst: 1 << 49}, ""},
		{"bucket span past 2^50", core.Limit{Algorithm: core.TokenBucket, Quota: 500, Window: time.Millisecond, Burst: 1<<49 + 1}, "exceeds 2^50 µs"},
		{"leaky longest wait", core.Limit{Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, Burst: 1, MaxWait: span}, ""},
		{"leaky wait past 2^50", core.Limit{Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, Burst: 1, MaxWait: span + time.Microsecond}, "max wait"},
		{"leaky negative wait", core.Limit{Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, Burst: 1, MaxWait: -1}, "max wait -1ns is negative"},
		{"burst ignored by fixed window", core.Limit{Quota: 1, Window: time.Second, Burst: -5, MaxWait: -1}, ""},
	}
	for _, c := range cases {
		err := c.l.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

func TestItemValidate(t *testing.T) {
	l := core.Limit{Algorithm: core.TokenBucket, Quota: 10, Window: time.Second, Burst: 4}
	for cost, ok := range map[int64]bool{-1: false, 0: true, 4: true, 5: false} {
		it := core.Item{Budget: "b", Limit: l, Cost: cost}
		if err := it.Validate(); (err == nil) != ok {
			t.Errorf("cost %d: %v", cost, err)
		} else if err != nil && !strings.HasPrefix(err.Error(), `budget "b": cost`) {
			t.Errorf("cost %d: error %q does not name the budget and the cost", cost, err)
		}
	}
	it := core.Item{Budget: "b", Limit: core.Limit{Quota: 1}}
	if err := it.Validate(); err == nil || err.Error() != `budget "b": window 0s is not positive` {
		t.Errorf("bad limit: %v", err)
	}
}

func TestValidateBudgetsAndLayers(t *testing.T) {
	key := func(*core.Request) (string, error) { return "k", nil }
	good := core.Budget{Name: "a", Quota: 5, Window: time.Second, Key: key}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	// Every problem at once, each naming its budget; the limit's own rules
	// included.
	bad := core.Budget{Name: "b", Algorithm: core.TokenBucket, Quota: 2000, Window: time.Millisecond, Burst: -1}
	err := bad.Validate()
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Budget.Validate: %v, want a *ConfigError", err)
	}
	want := []string{
		`budget "b": quota 2000 per 1ms is more than one unit per microsecond`,
		`budget "b": burst -1 is negative`,
		`budget "b": no key function`,
	}
	if got := ce.Problems; len(got) != len(want) {
		t.Fatalf("problems %q, want %q", got, want)
	}
	for i, p := range ce.Problems {
		if p.Error() != want[i] {
			t.Errorf("problem %d: %q, want %q", i, p, want[i])
		}
	}

	if err := core.ValidateBudgets([]core.Budget{good, good}); err == nil || !strings.Contains(err.Error(), `budget "a": defined more than once`) {
		t.Errorf("duplicate budget: %v", err)
	}
	if err := core.ValidateBudgets(nil); err != nil {
		t.Errorf("no budgets: %v; an engine of guards alone needs none", err)
	}
	local := good
	local.FailureMode = core.FailLocal
	if err := core.ValidateBudgets([]core.Budget{local}); err != nil {
		t.Errorf("fail-local is New's to check against the fallback store: %v", err)
	}

	// A layer is validated as Engine.Layer validates it, without an engine.
	budgets := []core.Budget{good}
	if err := core.ValidateLayer(budgets, core.Use("a"), core.Cost(5)); err != nil {
		t.Errorf("valid layer: %v", err)
	}
	for _, c := range []struct {
		opts []core.LayerOption
		want string
	}{
		{[]core.LayerOption{core.Use("a"), core.Cost(6)}, `budget "a": cost 6 exceeds what the budget can ever hold (5)`},
		{[]core.LayerOption{core.Use("nope")}, `layer: unknown budget "nope"`},
		{nil, "layer: no budgets"},
		{[]core.LayerOption{core.Use("a"), core.Headers(99)}, "layer: unknown header style 99"},
	} {
		err := core.ValidateLayer(budgets, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateLayer: %v, want %q", err, c.want)
		}
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: budgets})
		if _, lerr := eng.Layer(c.opts...); lerr == nil || lerr.Error() != err.Error() {
			t.Errorf("Engine.Layer says %v, ValidateLayer %v", lerr, err)
		}
	}
	if err := core.ValidateLayer([]core.Budget{bad}, core.Use("b")); err == nil || !strings.Contains(err.Error(), "burst -1 is negative") {
		t.Errorf("ValidateLayer on bad budgets: %v", err)
	}
}
