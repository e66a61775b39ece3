package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// tenantsDoc is the policy file of an API whose tenants get quotas by
// tier, with the tenants assigned in the same file.
const tenantsDoc = `tiers:
  free: 100/min
  pro: 1000/min
  enterprise: {quota: 10000/min}
tier_fallback: free
plans:
  bulk: {exports: 50}
subjects:
  acme: pro
  globex: {tier: enterprise}
  initech: {tier: pro, overrides: {api: 5000}}
  hooli: {plan: bulk}
budgets:
  api: {window: 1m, key: tenant, quota_by: tier}
  exports: {quota: 10, window: 1h, key: tenant, quota_by: plan}
layers:
  api: {use: [api]}
  exports: {use: [exports]}
`

func tenantEngine(t *testing.T, cfg *Document) *core.Engine {
	t.Helper()
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	return core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
}

func quotaOf(t *testing.T, l *core.Layer, tenant string) int64 {
	t.Helper()
	d := take(l, req("GET", "X-Tenant", tenant))
	if len(d.Results) != 1 {
		t.Fatalf("%s: %d results", tenant, len(d.Results))
	}
	return d.Results[0].Limit.Quota
}

// TestAssignedSubjects: tiers given as quotas, subjects assigned in the
// file, no lookup function and no cache.
func TestAssignedSubjects(t *testing.T) {
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			doc := tenantsDoc
			if format == "json" {
				doc = `{"tiers": {"free": "100/min", "pro": "1000/min", "enterprise": {"quota": "10000/min"}},
 "tier_fallback": "free",
 "plans": {"bulk": {"exports": 50}},
 "subjects": {"acme": "pro", "globex": {"tier": "enterprise"}, "initech": {"tier": "pro", "overrides": {"api": 5000}}, "hooli": {"plan": "bulk"}},
 "budgets": {"api": {"window": "1m", "key": "tenant", "quota_by": "tier"},
             "exports": {"quota": 10, "window": "1h", "key": "tenant", "quota_by": "plan"}},
 "layers": {"api": {"use": ["api"]}, "exports": {"use": ["exports"]}}}`
			}
			cfg, err := Parse("p."+format, []byte(doc), LoadConfig{Keys: testKeys()})
			if err != nil {
				t.Fatal(err)
			}
			if b := cfg.Budgets()[0]; b.Quota != 100 {
				t.Errorf("api's static quota = %d, want the fallback tier's 100", b.Quota)
			}
			eng := tenantEngine(t, cfg)
			api, err := cfg.Layer(eng, "api")
			if err != nil {
				t.Fatal(err)
			}
			exports, err := cfg.Layer(eng, "exports")
			if err != nil {
				t.Fatal(err)
			}
			for tenant, want := range map[string]int64{"acme": 1000, "globex": 10000, "initech": 5000, "hooli": 100, "unlisted": 100} {
				if got := quotaOf(t, api, tenant); got != want {
					t.Errorf("api quota of %s = %d, want %d", tenant, got, want)
				}
			}
			for tenant, want := range map[string]int64{"hooli": 60, "acme": 10} {
				if got := quotaOf(t, exports, tenant); got != want {
					t.Errorf("exports quota of %s = %d, want %d", tenant, got, want)
				}
			}
			// The quota is enforced, not only reported.
			if n := admitted(api, 150, func() *core.Request { return req("GET", "X-Tenant", "free-tenant") }); n != 100 {
				t.Errorf("a free tenant got %d of 150 requests through, want 100", n)
			}
		})
	}
}

// TestAssignedBeforeLookup: a subject assigned in the file is not looked
// up; the others are.
func TestAssignedBeforeLookup(t *testing.T) {
	opts := testOptions(t, nil, map[string]Subject{"db-tenant": {Tier: "pro"}})
	cfg, err := Parse("p.yaml", []byte(tenantsDoc), opts)
	if err != nil {
		t.Fatal(err)
	}
	api, _ := cfg.Layer(tenantEngine(t, cfg), "api")
	if got := quotaOf(t, api, "globex"); got != 10000 {
		t.Errorf("assigned globex: quota %d, want 10000", got)
	}
	if n := opts.Subjects.Lookups(); n != 0 {
		t.Errorf("an assigned subject was looked up (%d lookups)", n)
	}
	if got := quotaOf(t, api, "db-tenant"); got != 1000 {
		t.Errorf("looked-up db-tenant: quota %d, want 1000", got)
	}
	if got := quotaOf(t, api, "nobody"); got != 100 {
		t.Errorf("unknown tenant (lookup fails): quota %d, want the fallback tier's 100", got)
	}
}

// TestAssignedSubjectsReload: moving a tenant to another tier in the file
// and reloading applies at the next request, with the count kept.
func TestAssignedSubjectsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(tenantsDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := LoadConfig{Keys: testKeys()}
	cfg, err := Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	eng := tenantEngine(t, cfg)
	api, _ := cfg.Layer(eng, "api")
	r := NewReloader(eng, path, opts, cfg)
	if n := admitted(api, 100, func() *core.Request { return req("GET", "X-Tenant", "acme") }); n != 100 {
		t.Fatalf("acme (pro): %d of 100 admitted", n)
	}
	downgraded := []byte(replaceOnce(t, tenantsDoc, "  acme: pro\n", "  acme: free\n"))
	if err := os.WriteFile(path, downgraded, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	d := take(api, req("GET", "X-Tenant", "acme"))
	if d.Allowed || d.Results[0].Limit.Quota != 100 {
		t.Errorf("acme after the downgrade to free with 100 spent: allowed %v, quota %d; want denied at 100", d.Allowed, d.Results[0].Limit.Quota)
	}
	// A bad file changes nothing.
	if err := os.WriteFile(path, []byte(replaceOnce(t, tenantsDoc, "  acme: pro\n", "  acme: gold\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("a file assigning an unknown tier was reloaded")
	}
	if q := quotaOf(t, api, "globex"); q != 10000 {
		t.Errorf("after a failed reload globex has %d, want 10000", q)
	}
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	t.Fatalf("%q not in the document", old)
	return ""
}

// TestAssignMistakes: every bad input of the subjects section and of
// quota tiers is reported at its place.
func TestAssignMistakes(t *testing.T) {
	const quotaTiers = "tiers:\n  free: 100/min\n  pro: 1000/min\ntier_fallback: free\n" // lines 1-4
	const api = "budgets:\n  api: {window: 1m, key: tenant, quota_by: tier}\n"           // lines 5-6 after quotaTiers
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown tier", quotaTiers + "subjects:\n  acme: gold\n" + api,
			`c.yaml:6:9: subjects.acme: unknown tier "gold"; defined: free, pro`},
		{"misspelt tier", quotaTiers + "subjects:\n  acme: {tier: por}\n" + api,
			`c.yaml:6:16: subjects.acme.tier: unknown tier "por" (did you mean "pro"?); defined: free, pro`},
		{"subject assigned twice", quotaTiers + "subjects:\n  acme: pro\n  acme: free\n" + api,
			`c.yaml:7:3: subjects.acme: "acme" is defined twice (first at line 6)`},
		{"subject assigned twice in JSON", `{"tiers": {"free": "1/min"}, "subjects": {"a": "free", "a": "free"}, "budgets": {}}`,
			`"a" is defined twice`},
		{"bad quota unit", "tiers:\n  free: 100/fortnight\n" + api,
			`c.yaml:2:9: tiers.free: quota "100/fortnight": "fortnight" is not a window`},
		{"zero quota", "tiers:\n  free: 0/min\n" + api, `c.yaml:2:9: tiers.free: quota "0/min": 0 is below 1`},
		{"quota beyond the maximum", "tiers:\n  free: 9999999999999999/min\n" + api, `c.yaml:2:9: tiers.free: quota "9999999999999999/min": 9999999999999999 exceeds 999999999999999`},
		{"quota without a window", "tiers:\n  free: 100\n" + api,
			`c.yaml:2:9: tiers.free: tier "free": 100 is neither a quota nor a share: write 100/min for a quota, or 100% for a share`},
		{"quota field without a window", "tiers:\n  free: {quota: 100}\n" + api,
			`c.yaml:2:17: tiers.free.quota: quota "100" is not a quota per window, such as 100/min`},
		{"share and quota", "tiers:\n  free: {share: 25%, quota: 100/min}\n" + api,
			`c.yaml:2:29: tiers.free.quota: tier "free" has both a share and a quota`},
		{"tier window differs", quotaTiers + "subjects: {a: pro}\nbudgets:\n  api: {window: 1h, key: tenant, quota_by: tier}\n",
			`c.yaml:7:3: budgets.api: tier "free" is 100 per 1m0s, but budget "api" counts per 1h0m0s`},
		{"no quota and no fallback", "tiers:\n  free: 100/min\nsubjects: {a: free}\n" + api,
			`c.yaml:5:3: budgets.api: budget "api" has no quota; give one, or set tier_fallback`},
		{"share tier without the budget's quota", "tiers:\n  free: 100/min\n  half: 50%\ntier_fallback: free\nsubjects: {a: half}\n" + api,
			`c.yaml:7:3: budgets.api: tier "half" is a share of the budget's quota, and budget "api" gives none`},
		{"override of an unknown budget", quotaTiers + "subjects:\n  acme: {tier: pro, overrides: {apii: 5}}\n" + api,
			`c.yaml:6:33: subjects.acme.overrides.apii: unknown budget "apii" (did you mean "api"?)`},
		{"override of a flat budget", quotaTiers + "subjects:\n  acme: {overrides: {ip: 5}}\n" + api + "  ip: {quota: 10, window: 1m, key: ip}\n",
			`c.yaml:6:22: subjects.acme.overrides.ip: budget "ip" is flat, so an override would never apply`},
		{"override out of range", quotaTiers + "subjects:\n  acme: {overrides: {api: 0}}\n" + api,
			`c.yaml:6:27: subjects.acme.overrides.api: the override of "api" 0 is below 1`},
		{"override beyond the algorithm", quotaTiers + "subjects:\n  acme: {overrides: {api: 200000}}\n" + "budgets:\n  api: {window: 1m, key: tenant, quota_by: tier, algorithm: sliding_log}\n",
			`c.yaml:6:27: subjects.acme.overrides.api: the override 200000 of subject "acme": quota 200000 exceeds 100000`},
		{"unknown plan", "plans:\n  pro: {b: 5}\nsubjects:\n  acme: {plan: por}\nbudgets:\n  b: {quota: 1, window: 1m, key: tenant, quota_by: plan}\n",
			`c.yaml:4:16: subjects.acme.plan: unknown plan "por" (did you mean "pro"?); defined: pro`},
		{"plan without plans", "subjects:\n  acme: {plan: pro}\nbudgets:\n  b: {quota: 1, window: 1m, key: tenant, quota_by: plan}\n",
			`c.yaml:2:16: subjects.acme.plan: plan "pro": no plans are defined`},
		{"tier without tiers", "subjects:\n  acme: pro\nbudgets:\n  b: {quota: 1, window: 1m, key: tenant, quota_by: plan}\n",
			`c.yaml:2:9: subjects.acme: tier "pro": no tiers are defined`},
		{"bad cap", quotaTiers + "subjects:\n  acme: {cap: lots}\n" + api,
			`c.yaml:6:15: subjects.acme.cap: cap (or none) "lots" is not a whole number`},
		{"subject assigns nothing", quotaTiers + "subjects:\n  acme: {}\n" + api,
			`c.yaml:6:9: subjects.acme: subject "acme" assigns nothing`},
		{"unknown subject field", quotaTiers + "subjects:\n  acme: {teir: pro}\n" + api,
			`c.yaml:6:10: subjects.acme.teir: unknown field "teir" in subject "acme" (did you mean "tier"?)`},
		{"subjects but nothing by tier or plan", "tiers:\n  free: 100/min\nsubjects:\n  acme: free\n" + yamlHead,
			`c.yaml:4:3: subjects: subjects are assigned, but no budget has quota_by tier or plan`},
		{"subjects not a mapping", quotaTiers + "subjects: [acme]\n" + api, `c.yaml:5:11: subjects: subjects must be a mapping`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "c.yaml"
			if tc.doc[0] == '{' {
				name = "c.json"
			}
			_, err := Parse(name, []byte(tc.doc), LoadConfig{Keys: testKeys()})
			assertProblem(t, err, tc.want)
		})
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in     string
		quota  int64
		window time.Duration
	}{
		{"100/min", 100, time.Minute},
		{"100 / minute", 100, time.Minute},
		{"5000/hour", 5000, time.Hour},
		{"10/s", 10, time.Second},
		{"1/d", 1, 24 * time.Hour},
		{"300/5m", 300, 5 * time.Minute},
		{"3/1500ms", 3, 1500 * time.Millisecond},
		{"7/MIN", 7, time.Minute},
	} {
		q, w, err := ParseRate(tc.in)
		if err != nil || q != tc.quota || w != tc.window {
			t.Errorf("ParseRate(%q) = %d, %v, %v; want %d, %v", tc.in, q, w, err, tc.quota, tc.window)
		}
	}
	for _, in := range []string{"", "100", "/min", "100/", "x/min", "-1/min", "0/min", "1.5/min", "100/0s", "100/-1m", "100/1us", "100/fortnight", "9223372036854775808/min"} {
		if q, w, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, %v; want an error", in, q, w)
		}
	}
}

func TestNewTiersQuota(t *testing.T) {
	tiers, err := NewTiers([]Tier{
		{Name: "free", Quota: 100, Window: time.Minute, PinnedOnly: true},
		{Name: "small", Share: Percent(25), UpTo: 10},
		{Name: "big", Quota: 5000, Window: time.Minute},
	}, "free")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    Subject
		want int64
	}{
		{Subject{Tier: "free"}, 100},
		{Subject{Cap: 5}, 75}, // small: 25% of 300
		{Subject{Cap: 50}, 5000},
		{Subject{Cap: NoCap}, 5000},
	} {
		tier, err := tiers.Of(tc.s)
		if err != nil || tier.Scale(300) != tc.want {
			t.Errorf("%+v: tier %q scales 300 to %d (%v), want %d", tc.s, tier.Name, tier.Scale(300), err, tc.want)
		}
	}
	for name, bad := range map[string]Tier{
		"both":      {Name: "x", Share: Percent(25), Quota: 1, Window: time.Second},
		"neither":   {Name: "x"},
		"no window": {Name: "x", Quota: 1},
		"negative":  {Name: "x", Quota: -1, Window: time.Second},
		"too large": {Name: "x", Quota: core.MaxQuota + 1, Window: time.Second},
	} {
		if _, err := NewTiers([]Tier{bad}, ""); err == nil {
			t.Errorf("%s: NewTiers accepted %+v", name, bad)
		}
	}
}

// TestResolverAssigned: a key not assigned and with no lookup is in the
// fallback tier, or without one in the tier derived for a cap of 0.
func TestResolverAssigned(t *testing.T) {
	ctx := t.Context()
	withFallback := &Resolver{Tiers: seedTiers(t, "large"), Assigned: map[string]Subject{"a": {Tier: "xl"}}}
	noFallback := &Resolver{Tiers: seedTiers(t, ""), Assigned: map[string]Subject{"a": {Tier: "xl"}}}
	for _, tc := range []struct {
		r    *Resolver
		key  string
		want int64
	}{
		{withFallback, "a", 600},
		{withFallback, "b", 300}, // large: 100%
		{noFallback, "a", 600},
		{noFallback, "b", 75}, // small: derived for a cap of 0
	} {
		if q, err := tc.r.Quota(ctx, "t", ByTier, 300, tc.key); err != nil || q != tc.want {
			t.Errorf("key %q: quota %d, %v; want %d", tc.key, q, err, tc.want)
		}
	}
	if _, err := (&Resolver{Tiers: seedTiers(t, "")}).Quota(ctx, "t", ByTier, 300, "a"); err == nil {
		t.Error("a resolver with neither Assigned nor Subjects resolved a quota")
	}
}
