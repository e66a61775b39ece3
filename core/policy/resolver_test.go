package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func TestTiersOf(t *testing.T) {
	tiers := seedTiers(t, "")
	for _, tc := range []struct {
		s    Subject
		want string
	}{
		{Subject{Cap: 0}, "small"},
		{Subject{Cap: 100}, "small"},
		{Subject{Cap: 101}, "medium"},
		{Subject{Cap: 1000}, "medium"},
		{Subject{Cap: 1001}, "large"},
		{Subject{Cap: 10_000}, "large"},
		{Subject{Cap: 10_001}, "xl"},
		{Subject{Cap: NoCap}, "xl"},
		// A pinned tier beats the derived one, in both directions.
		{Subject{Cap: 50, Tier: "large"}, "large"},
		{Subject{Cap: NoCap, Tier: "small"}, "small"},
		// max is reachable by pinning only.
		{Subject{Cap: 1 << 40, Tier: "max"}, "max"},
	} {
		got, err := tiers.Of(tc.s)
		if err != nil || got.Name != tc.want {
			t.Errorf("Of(%+v) = %q, %v; want %q", tc.s, got.Name, err, tc.want)
		}
	}
	if _, err := tiers.Of(Subject{Tier: "gold"}); !errors.Is(err, ErrUnknownTier) {
		t.Errorf("unknown pinned tier: err = %v, want ErrUnknownTier", err)
	}
	noTop, err := NewTiers([]Tier{{Name: "a", Share: Percent(10), UpTo: 5}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noTop.Of(Subject{Cap: 6}); !errors.Is(err, ErrUnknownTier) {
		t.Errorf("cap above every tier without a top tier: err = %v", err)
	}
}

func TestNewTiersRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tiers []Tier
		fb    string
		want  string
	}{
		{"two tops", []Tier{{Name: "a", Share: Percent(1)}, {Name: "b", Share: Percent(2)}}, "", "both have no up_to"},
		{"same up_to", []Tier{{Name: "a", Share: Percent(1), UpTo: 5}, {Name: "b", Share: Percent(2), UpTo: 5}}, "", "same up_to"},
		{"no share", []Tier{{Name: "a", UpTo: 5}}, "", "no share"},
		{"dup", []Tier{{Name: "a", Share: Percent(1), UpTo: 5}, {Name: "a", Share: Percent(2), UpTo: 6}}, "", "more than once"},
		{"pinned with up_to", []Tier{{Name: "a", Share: Percent(1), UpTo: 5, PinnedOnly: true}}, "", "pinned-only"},
		{"fallback", []Tier{{Name: "a", Share: Percent(1)}}, "b", "fallback tier"},
		{"no name", []Tier{{Share: Percent(1)}}, "", "no name"},
	} {
		_, err := NewTiers(tc.tiers, tc.fb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// The multi-tenant API's five per-tenant budgets (reference quotas per
// minute) and a flat per-(tenant, operator) budget.
var seedReferences = []struct {
	name      string
	reference int64
	small     int64 // at 25%
}{
	{"t_mutate", 300, 75},
	{"t_heavy", 30, 8},
	{"t_values", 600, 150}, // ten a second over a one-minute window
	{"t_check", 10, 3},
	{"t_outbound", 5, 2}, // 1.25 → 2, never 1
}

func TestResolverSeedTierArithmetic(t *testing.T) {
	apps := newSubjectTable(map[string]Subject{
		"tiny":    {Cap: 80},                   // derived: small
		"pinned":  {Cap: 80, Tier: "large"},    // pinned beats derived small
		"big":     {Cap: 5000},                 // derived: large (100%)
		"unbound": {Cap: NoCap},                // xl, 200%
		"demoted": {Cap: NoCap, Tier: "small"}, // pinned down
	})
	subs := MustSubjects(apps.lookup, CacheConfig{})
	r := &Resolver{Tiers: seedTiers(t, ""), Subjects: subs}
	ctx := context.Background()
	for _, b := range seedReferences {
		for _, tc := range []struct {
			key  string
			want int64
		}{
			{"tiny", b.small},
			{"demoted", b.small},
			{"pinned", b.reference},
			{"big", b.reference},
			{"unbound", 2 * b.reference},
		} {
			got, err := r.Quota(ctx, b.name, ByTier, b.reference, tc.key)
			if err != nil || got != tc.want {
				t.Errorf("%s for %s: %d, %v; want %d", b.name, tc.key, got, err, tc.want)
			}
		}
		// A flat budget ignores the tier.
		got, err := r.Quota(ctx, b.name, Flat, b.reference, "tiny")
		if err != nil || got != b.reference {
			t.Errorf("flat %s for tiny: %d, %v; want %d", b.name, got, err, b.reference)
		}
	}
	// Five budgets resolved for five tenants: one lookup per tenant.
	if n := subs.Lookups(); n != 5 {
		t.Fatalf("%d lookups, want 5 (one per tenant, then cached)", n)
	}
}

func TestResolverPlansAndOverrides(t *testing.T) {
	plans, err := NewPlans(map[string]map[string]int64{
		"pro":        {"email_send": 500, "manage": 100},
		"enterprise": {"email_send": 4000},
	})
	if err != nil {
		t.Fatal(err)
	}
	apps := newSubjectTable(map[string]Subject{
		"free":   {},
		"pro":    {Plan: "pro"},
		"ent":    {Plan: "enterprise"},
		"custom": {Plan: "pro", Overrides: map[string]int64{"email_send": 250}},
		"bad":    {Plan: "platinum"},
		"zero":   {Overrides: map[string]int64{"email_send": 0}},
	})
	r := &Resolver{Plans: plans, Subjects: MustSubjects(apps.lookup, CacheConfig{})}
	ctx := context.Background()
	for _, tc := range []struct {
		key, budget string
		want        int64
		err         error
	}{
		{"free", "email_send", 1000, nil},  // base
		{"pro", "email_send", 1500, nil},   // base + plan increase
		{"pro", "manage", 200, nil},        // another budget of the plan
		{"ent", "manage", 100, nil},        // the plan does not raise it
		{"ent", "email_send", 5000, nil},   // base + 4000
		{"custom", "email_send", 250, nil}, // override replaces base and plan, even below them
		{"custom", "manage", 200, nil},     // the override is per budget
		{"bad", "email_send", 0, ErrUnknownPlan},
		{"nobody", "email_send", 0, errUnknownSubject},
	} {
		base := int64(1000)
		if tc.budget == "manage" {
			base = 100
		}
		got, err := r.Quota(ctx, tc.budget, ByPlan, base, tc.key)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s/%s: err = %v, want %v", tc.key, tc.budget, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s/%s = %d, %v; want %d", tc.key, tc.budget, got, err, tc.want)
		}
	}
	if _, err := r.Quota(ctx, "email_send", ByPlan, 1000, "zero"); err == nil {
		t.Error("an override of 0 resolved without error")
	}
	// Overrides apply to by-tier budgets too, but never to flat ones.
	r.Tiers = seedTiers(t, "")
	if got, _ := r.Quota(ctx, "email_send", ByTier, 1000, "custom"); got != 250 {
		t.Errorf("override on a by-tier budget: %d, want 250", got)
	}
	if got, _ := r.Quota(ctx, "email_send", Flat, 1000, "custom"); got != 1000 {
		t.Errorf("override on a flat budget: %d, want 1000", got)
	}
}

func TestResolverFallback(t *testing.T) {
	failing := func(context.Context, string) (Subject, error) { return Subject{}, errors.New("licence service down") }
	var reported []error
	subs := MustSubjects(failing, CacheConfig{OnError: func(err error) { reported = append(reported, err) }})
	ctx := context.Background()

	// Without a fallback tier the error surfaces: the engine then applies
	// the reference quota and reports it.
	r := &Resolver{Tiers: seedTiers(t, ""), Subjects: subs}
	if _, err := r.Quota(ctx, "t_mutate", ByTier, 300, "acme"); err == nil || !strings.Contains(err.Error(), "licence service down") {
		t.Fatalf("err = %v", err)
	}
	// With one, the fallback tier applies.
	r = &Resolver{Tiers: seedTiers(t, "small"), Subjects: subs}
	if got, err := r.Quota(ctx, "t_mutate", ByTier, 300, "acme2"); err != nil || got != 75 {
		t.Fatalf("fallback tier: %d, %v; want 75", got, err)
	}
	// An unknown pinned tier also takes the fallback.
	subs2 := MustSubjects(func(context.Context, string) (Subject, error) { return Subject{Tier: "gold"}, nil }, CacheConfig{})
	r = &Resolver{Tiers: seedTiers(t, "small"), Subjects: subs2}
	if got, err := r.Quota(ctx, "t_mutate", ByTier, 300, "acme"); err != nil || got != 75 {
		t.Fatalf("unknown pinned tier with fallback: %d, %v", got, err)
	}
	if len(reported) != 2 {
		t.Fatalf("OnError saw %d failures, want 2 (one per key)", len(reported))
	}
}

// TestQuotaFuncInEngine drives the resolver through a real engine and
// memory store: seed 004's tiering, a flat budget and the subject key of a
// budget keyed by (tenant, operator).
func TestQuotaFuncInEngine(t *testing.T) {
	apps := newSubjectTable(map[string]Subject{
		"acme":  {Cap: 80},
		"pinco": {Cap: 80, Tier: "large"},
	})
	keys := testKeys()
	r := &Resolver{Tiers: seedTiers(t, ""), Subjects: MustSubjects(apps.lookup, CacheConfig{})}
	clock := newFakeClock()
	store := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
	defer store.Close()
	budgets := []core.Budget{
		{Name: "t_outbound", Quota: 5, Window: time.Minute, Key: keys["tenant"], QuotaFunc: r.QuotaFunc("t_outbound", ByTier, 5, nil)},
		{Name: "card_timeline", Quota: 5, Window: time.Minute, Key: keys["tenant+operator"]},
		{Name: "op_scaled", Quota: 5, Window: time.Minute, Key: keys["tenant+operator"], QuotaFunc: r.QuotaFunc("op_scaled", ByTier, 5, keys["tenant"])},
	}
	eng := core.MustNew(core.Config{Store: store, Budgets: budgets})
	for _, tc := range []struct {
		budget, tenant string
		want           int
	}{
		{"t_outbound", "acme", 2},    // 5 × 25%, rounded up
		{"t_outbound", "pinco", 5},   // pinned large: 100%
		{"card_timeline", "acme", 5}, // flat: the tier does not matter
		{"op_scaled", "acme", 2},     // tier looked up by tenant, counted per operator
	} {
		l := eng.MustLayer(core.Use(tc.budget))
		got := admitted(l, 10, func() *core.Request { return req("POST", "X-Tenant", tc.tenant, "X-Operator", "op1") })
		if got != tc.want {
			t.Errorf("%s for %s admitted %d of 10, want %d", tc.budget, tc.tenant, got, tc.want)
		}
		if tc.budget == "t_outbound" {
			d := take(l, req("POST", "X-Tenant", tc.tenant))
			if len(d.Results) != 1 || d.Results[0].Limit.Quota != int64(tc.want) {
				t.Errorf("reported quota %+v, want %d", d.Results, tc.want)
			}
		}
	}
}
