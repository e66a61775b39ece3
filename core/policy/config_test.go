package policy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func testOptions(t testing.TB, env map[string]string, subjects map[string]Subject) LoadConfig {
	apps := newSubjectTable(subjects)
	return LoadConfig{Keys: testKeys(), Subjects: MustSubjects(apps.lookup, CacheConfig{}), Env: envOf(env)}
}

func TestLoadSeed004(t *testing.T) {
	opts := testOptions(t, map[string]string{"PUBLIC_RATE_LIMIT": "7", "PUBLIC_RATE_WINDOW": "30s"},
		map[string]Subject{"acme": {Cap: 80}, "pinned": {Cap: 80, Tier: "large"}})
	cfg, err := Load("testdata/seed004.yaml", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"t_mutate", "t_heavy", "t_values", "t_check", "t_outbound", "card_timeline",
		"portal_subscriber", "public_login", "public_tenant_lookup", "portal_zerologin"}
	if got := cfg.BudgetNames(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("budgets %v, want %v", got, want)
	}
	byName := map[string]core.Budget{}
	for _, b := range cfg.Budgets() {
		byName[b.Name] = b
	}
	// Environment overrides applied; the default where the variable is unset.
	if b := byName["public_login"]; b.Quota != 7 || b.Window != 30*time.Second || b.FailureMode != core.FailClosed || b.KeyClass != "ip" {
		t.Errorf("public_login = %+v", b)
	}
	if b := byName["portal_zerologin"]; b.Quota != 120 || b.Window != time.Minute {
		t.Errorf("portal_zerologin quota %d window %v, want 120 per 1m", b.Quota, b.Window)
	}
	if b := byName["t_mutate"]; b.QuotaFunc == nil || strings.Join(b.IgnoreMethods, ",") != "GET,HEAD,OPTIONS" {
		t.Errorf("t_mutate = %+v", b)
	}
	if b := byName["card_timeline"]; b.QuotaFunc != nil {
		t.Error("a flat budget has a QuotaFunc")
	}
	if s, _ := cfg.QuotaBy("t_outbound"); s != ByTier {
		t.Errorf("t_outbound quota_by %v", s)
	}

	store := memstore.MustNew(memstore.Config{Clock: newFakeClock(), SweepInterval: -1})
	defer store.Close()
	eng, err := core.New(core.Config{Store: store, Budgets: cfg.Budgets()})
	if err != nil {
		t.Fatal(err)
	}
	layer := func(name string) *core.Layer {
		l, err := cfg.Layer(eng, name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	api, heavy, values := layer("tenant_api"), layer("heavy_export"), layer("values")
	acme := func() *core.Request { return req("POST", "X-Tenant", "acme") }
	if got := admitted(api, 100, acme); got != 75 {
		t.Errorf("t_mutate for a small tenant admitted %d, want 75", got)
	}
	if got := admitted(api, 10, func() *core.Request { return req("GET", "X-Tenant", "acme") }); got != 10 {
		t.Errorf("t_mutate ignores GET, admitted %d of 10", got)
	}
	if got := admitted(heavy, 20, acme); got != 8 {
		t.Errorf("t_heavy for a small tenant admitted %d, want 8 (30 × 25%% = 7.5, rounded up)", got)
	}
	if got := admitted(values, 1000, acme); got != 150 {
		t.Errorf("t_values for a small tenant admitted %d, want 150", got)
	}
	if got := admitted(values, 1000, func() *core.Request { return req("POST", "X-Tenant", "pinned") }); got != 600 {
		t.Errorf("t_values for a tenant pinned to large admitted %d, want 600", got)
	}
	login := layer("login")
	if got := admitted(login, 20, func() *core.Request { return req("POST") }); got != 7 {
		t.Errorf("public_login admitted %d, want 7 from PUBLIC_RATE_LIMIT", got)
	}
}

// TestLoadSeed002 loads a JSON file that still spells quota_by the old
// way (scaling): it loads as quota_by, with a warning per budget.
func TestLoadSeed002(t *testing.T) {
	opts := testOptions(t, nil, map[string]Subject{
		"acme":   {Plan: "pro"},
		"mega":   {Plan: "enterprise", Overrides: map[string]int64{"email_send": 20_000}},
		"nobody": {},
	})
	logger, warned := warningLogger()
	opts.Logger = logger
	cfg, err := Load("testdata/seed002.json", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"testdata/seed002.json: $.budgets.email_send.scaling: scaling is the old name of quota_by, read until the next release; write quota_by: plan",
		"testdata/seed002.json: $.budgets.manage.scaling: scaling is the old name of quota_by, read until the next release; write quota_by: plan",
	}
	if got := warned.list(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	r := cfg.Resolver()
	ctx := t.Context()
	for _, tc := range []struct {
		budget, org string
		want        int64
	}{
		{"email_send", "nobody", 1000},
		{"email_send", "acme", 1500},
		{"email_send", "mega", 20_000}, // the override replaces base and plan
		{"manage", "mega", 300},
	} {
		s, _ := cfg.QuotaBy(tc.budget)
		var ref int64
		for _, b := range cfg.Budgets() {
			if b.Name == tc.budget {
				ref = b.Quota
			}
		}
		if got, err := r.Quota(ctx, tc.budget, s, ref, tc.org); err != nil || got != tc.want {
			t.Errorf("%s for %s = %d, %v; want %d", tc.budget, tc.org, got, err, tc.want)
		}
	}
	// The management budget is counted per credential but sized by the
	// organisation's plan.
	store := memstore.MustNew(memstore.Config{Clock: newFakeClock(), SweepInterval: -1})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	manage, err := cfg.Layer(eng, "manage")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k1", "k2"} {
		got := admitted(manage, 200, func() *core.Request { return req("PUT", "X-Api-Key", key, "X-Org", "acme") })
		if got != 150 {
			t.Errorf("credential %s of a pro organisation admitted %d, want 150", key, got)
		}
	}
}

// oldSpelling is a document that spells quota_by the way it was spelled
// until it was renamed: scaling.
const oldSpelling = `tiers:
  free: 100/min
  pro: 1000/min
tier_fallback: free
plans:
  gold: {exports: 5}
subjects:
  acme: {tier: pro, plan: gold}
budgets:
  api: {window: 1m, key: tenant, scaling: tier}
  exports: {quota: 10, window: 1h, key: tenant, scaling: plan}
  login: {quota: 5, window: 1m, key: ip, scaling: flat}
`

// TestOldSpellingOfQuotaBy: a budget's scaling reads as quota_by, each
// with a warning at its place, and resolves the same quotas; the new
// spelling loads without a warning; both in one budget is a problem.
func TestOldSpellingOfQuotaBy(t *testing.T) {
	load := func(doc string) (*Document, []string) {
		t.Helper()
		opts := testOptions(t, nil, nil)
		opts.Subjects = nil
		logger, warned := warningLogger()
		opts.Logger = logger
		cfg, err := Parse("c.yaml", []byte(doc), opts)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, warned.list()
	}
	oldCfg, oldWarned := load(oldSpelling)
	newCfg, newWarned := load(strings.ReplaceAll(oldSpelling, "scaling:", "quota_by:"))
	want := []string{
		"c.yaml:10:43: budgets.api.scaling: scaling is the old name of quota_by, read until the next release; write quota_by: tier",
		"c.yaml:11:58: budgets.exports.scaling: scaling is the old name of quota_by, read until the next release; write quota_by: plan",
		"c.yaml:12:51: budgets.login.scaling: scaling is the old name of quota_by, read until the next release; write quota_by: flat",
	}
	if strings.Join(oldWarned, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(oldWarned, "\n"), strings.Join(want, "\n"))
	}
	if len(newWarned) != 0 {
		t.Errorf("quota_by warned: %q", newWarned)
	}
	for _, tc := range []struct {
		budget string
		by     QuotaBy
	}{{"api", ByTier}, {"exports", ByPlan}, {"login", Flat}} {
		if got, _ := oldCfg.QuotaBy(tc.budget); got != tc.by {
			t.Errorf("scaling of %s read as %v, want %v", tc.budget, got, tc.by)
		}
		if got, _ := newCfg.QuotaBy(tc.budget); got != tc.by {
			t.Errorf("quota_by of %s read as %v, want %v", tc.budget, got, tc.by)
		}
	}
	quotas := func(cfg *Document) string {
		store := memstore.MustNew(memstore.Config{SweepInterval: -1})
		defer store.Close()
		eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
		var out []string
		for _, name := range []string{"api", "exports"} {
			l := eng.MustLayer(core.Use(name))
			for _, tenant := range []string{"acme", "other"} {
				var d core.Decision
				l.Decide(req("POST", "X-Tenant", tenant), &d)
				out = append(out, fmt.Sprintf("%s/%s=%d", name, tenant, d.Results[0].Limit.Quota))
			}
		}
		return strings.Join(out, " ")
	}
	if got, want := quotas(oldCfg), "api/acme=1000 api/other=100 exports/acme=15 exports/other=10"; got != want {
		t.Errorf("with scaling: %s; want %s", got, want)
	}
	if got, want := quotas(newCfg), quotas(oldCfg); got != want {
		t.Errorf("with quota_by: %s; with scaling: %s", got, want)
	}

	// Both in one budget: one problem, naming both, and nothing else
	// (quota_by is read).
	_, err := Parse("c.yaml", []byte(tiersHead+"subjects: {acme: small}\nbudgets:\n  a: {quota: 10, window: 1m, key: tenant, quota_by: tier, scaling: tier}\n"), testOptions(t, nil, nil))
	var ce *core.ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 1 ||
		ce.Problems[0].Error() != `c.yaml:6:68: budgets.a.scaling: budget "a" gives both quota_by and scaling, its old name; keep quota_by` {
		t.Errorf("both quota_by and scaling: %v", err)
	}
}

// TestOldSpellingWarnsByDefault: with no Logger, the warning goes to
// slog's default logger, so that it is seen with nothing configured.
func TestOldSpellingWarnsByDefault(t *testing.T) {
	var out strings.Builder
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&out, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	opts := testOptions(t, nil, nil)
	if _, err := Parse("c.yaml", []byte(oldSpelling), opts); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "level=WARN msg=\"quotagate: policy: deprecated setting\""); got != 3 {
		t.Errorf("slog's default logger got %d warnings, want 3:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "c.yaml:10:43: budgets.api.scaling: scaling is the old name of quota_by") {
		t.Errorf("the warning does not say where and what:\n%s", out.String())
	}
}

// TestEnvironment covers every way an environment value can be wrong:
// each stops loading with an error naming the variable.
func TestEnvironment(t *testing.T) {
	doc := `budgets:
  public:
    quota: {env: PUBLIC_RATE_LIMIT, default: 20}
    window: {env: PUBLIC_RATE_WINDOW, default: 1m}
    shadow: {env: PUBLIC_SHADOW, default: false}
    key: ip
`
	ok := func(env map[string]string, quota int64, window time.Duration, shadow bool) {
		t.Helper()
		cfg, err := Parse("p.yaml", []byte(doc), testOptions(t, env, nil))
		if err != nil {
			t.Fatalf("env %v: %v", env, err)
		}
		b := cfg.Budgets()[0]
		if b.Quota != quota || b.Window != window || b.Shadow != shadow {
			t.Fatalf("env %v: quota %d window %v shadow %v", env, b.Quota, b.Window, b.Shadow)
		}
	}
	ok(nil, 20, time.Minute, false)
	ok(map[string]string{"PUBLIC_RATE_LIMIT": "35", "PUBLIC_RATE_WINDOW": "10s", "PUBLIC_SHADOW": "true"}, 35, 10*time.Second, true)
	ok(map[string]string{"PUBLIC_RATE_LIMIT": " 35\n"}, 35, time.Minute, false)

	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PUBLIC_RATE_LIMIT": "twenty"}, `p.yaml:3:12: budgets.public.quota: environment variable PUBLIC_RATE_LIMIT="twenty": quota "twenty" is not a whole number`},
		{map[string]string{"PUBLIC_RATE_LIMIT": "0"}, `environment variable PUBLIC_RATE_LIMIT="0": quota 0 is below 1`},
		{map[string]string{"PUBLIC_RATE_LIMIT": "-5"}, `environment variable PUBLIC_RATE_LIMIT="-5"`},
		{map[string]string{"PUBLIC_RATE_LIMIT": ""}, `p.yaml:3:12: budgets.public.quota: environment variable PUBLIC_RATE_LIMIT="": is set but empty`},
		{map[string]string{"PUBLIC_RATE_WINDOW": "60"}, `p.yaml:4:13: budgets.public.window: environment variable PUBLIC_RATE_WINDOW="60": window "60" is not a duration with a unit`},
		{map[string]string{"PUBLIC_RATE_WINDOW": "-1m"}, `environment variable PUBLIC_RATE_WINDOW="-1m": window -1m0s is not positive`},
		{map[string]string{"PUBLIC_SHADOW": "yes"}, `environment variable PUBLIC_SHADOW="yes": shadow "yes" must be true or false`},
	} {
		_, err := Parse("p.yaml", []byte(doc), testOptions(t, tc.env, nil))
		assertProblem(t, err, tc.want)
		var ee *EnvError
		if !errors.As(err, &ee) {
			t.Errorf("env %v: error is not an *EnvError", tc.env)
		}
	}
	// A reference without a default needs the variable.
	_, err := Parse("p.yaml", []byte("budgets:\n  b: {quota: {env: LIMIT}, window: 1m, key: ip}\n"), testOptions(t, nil, nil))
	assertProblem(t, err, `p.yaml:2:14: budgets.b.quota: environment variable LIMIT="": is not set and quota has no default`)
}

// assertProblem checks that err is a *core.ConfigError with a problem
// whose message contains want.
func assertProblem(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want %q", want)
		return
	}
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("error %T %v is not a *core.ConfigError", err, err)
		return
	}
	for _, p := range ce.Problems {
		var pr *Problem
		if !errors.As(p, &pr) {
			t.Errorf("problem %T %v is not a *Problem", p, p)
		}
		if strings.Contains(p.Error(), want) {
			return
		}
	}
	t.Errorf("no problem contains %q; got:\n%v", want, err)
}

const yamlHead = "budgets:\n  ok: {quota: 10, window: 1m, key: ip}\n" // lines 1-2

// TestYAMLMistakes lists every kind of mistake with its expected location.
func TestYAMLMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"syntax", "budgets:\n  a: {quota: 1\n", `c.yaml:2: invalid YAML: did not find expected ',' or '}'`},
		{"tab indentation", "budgets:\n\ta: 1\n", `c.yaml:2: invalid YAML`},
		{"empty", "", `c.yaml:1:1: the document is empty`},
		{"two documents", yamlHead + "---\nbudgets: {}\n", `c.yaml:3:1: more than one YAML document`},
		{"not a mapping", "- a\n- b\n", `c.yaml:1:1: the configuration must be a mapping`},
		{"no budgets", "tiers: {}\n", `c.yaml:1:1: no budgets`},
		{"empty budgets", "budgets: {}\n", `c.yaml:1:10: budgets: budgets is empty`},
		{"unknown top-level field", yamlHead + "budget: {}\n", `c.yaml:3:1: budget: unknown field "budget" in the configuration (did you mean "budgets"?)`},
		{"unknown budget field", yamlHead + "  a:\n    qouta: 5\n    quota: 5\n    window: 1m\n    key: ip\n", `c.yaml:4:5: budgets.a.qouta: unknown field "qouta" in budget "a" (did you mean "quota"?)`},
		{"budget not a mapping", yamlHead + "  a: 5\n", `c.yaml:3:6: budgets.a: budget "a" must be a mapping, not a value`},
		{"duplicate budget", yamlHead + "  ok: {quota: 5, window: 1m, key: ip}\n", `c.yaml:3:3: budgets.ok: "ok" is defined twice (first at line 2)`},
		{"missing quota", yamlHead + "  a: {window: 1m, key: ip}\n", `c.yaml:3:3: budgets.a: budget "a" has no quota`},
		{"missing window", yamlHead + "  a: {quota: 1, key: ip}\n", `c.yaml:3:3: budgets.a: budget "a" has no window`},
		{"missing key", yamlHead + "  a: {quota: 1, window: 1m}\n", `c.yaml:3:3: budgets.a: budget "a" has no key`},
		{"quota not a number", yamlHead + "  a: {quota: 300/min, window: 1m, key: ip}\n", `c.yaml:3:14: budgets.a.quota: quota "300/min" is not a whole number`},
		{"quota zero", yamlHead + "  a: {quota: 0, window: 1m, key: ip}\n", `c.yaml:3:14: budgets.a.quota: quota 0 is below 1`},
		{"quota too large", yamlHead + "  a: {quota: 1000000000000000, window: 1m, key: ip}\n", `quota 1000000000000000 exceeds 999999999999999`},
		{"quota a list", yamlHead + "  a: {quota: [1], window: 1m, key: ip}\n", `c.yaml:3:14: budgets.a.quota: quota must be a value, not a list`},
		{"quota null", yamlHead + "  a: {quota: ~, window: 1m, key: ip}\n", `c.yaml:3:14: budgets.a.quota: quota is empty`},
		{"window without unit", yamlHead + "  a: {quota: 1, window: 60, key: ip}\n", `c.yaml:3:25: budgets.a.window: window "60" is not a duration with a unit`},
		{"window sub-millisecond", yamlHead + "  a: {quota: 1, window: 1500us, key: ip}\n", `window 1.5ms is not a whole number of milliseconds`},
		{"unknown algorithm", yamlHead + "  a: {algorithm: token-bucket, quota: 1, window: 1m, key: ip}\n", `c.yaml:3:18: budgets.a.algorithm: unknown algorithm "token-bucket"`},
		{"burst on a fixed window", yamlHead + "  a: {quota: 1, window: 1m, burst: 5, key: ip}\n", `c.yaml:3:36: budgets.a.burst: burst applies to token_bucket and leaky_bucket only, not fixed_window`},
		{"max_wait on a token bucket", yamlHead + "  a: {algorithm: token_bucket, quota: 1, window: 1m, max_wait: 1s, key: ip}\n", `budgets.a.max_wait: max_wait applies to leaky_bucket only, not token_bucket`},
		{"leaky bucket without max_wait", yamlHead + "  a: {algorithm: leaky_bucket, quota: 1, window: 1m, key: ip}\n", `c.yaml:3:3: budgets.a: a leaky_bucket needs a positive max_wait`},
		{"unknown key function", yamlHead + "  a: {quota: 1, window: 1m, key: tenat}\n", `c.yaml:3:34: budgets.a.key: unknown key function "tenat" (did you mean "tenant"?); known: apikey, global, ip, org, subscriber, tenant, tenant+operator`},
		{"fallback without fallback_key", yamlHead + "  a: {quota: 1, window: 1m, key: tenant, missing_key: fallback}\n", `c.yaml:3:55: budgets.a.missing_key: missing_key is fallback but no fallback_key is set`},
		{"fallback_key without fallback", yamlHead + "  a: {quota: 1, window: 1m, key: tenant, fallback_key: ip}\n", `budgets.a.fallback_key: fallback_key is set but missing_key is not fallback`},
		{"unknown missing_key", yamlHead + "  a: {quota: 1, window: 1m, key: tenant, missing_key: allow}\n", `missing_key: unknown missing-key action "allow" (want deny, skip or fallback)`},
		{"ignore_methods not a list", yamlHead + "  a: {quota: 1, window: 1m, key: ip, ignore_methods: GET}\n", `c.yaml:3:54: budgets.a.ignore_methods: ignore_methods must be a list`},
		{"window too long", yamlHead + "  a: {quota: 1, window: 9999999999h, key: ip}\n", `budgets.a.window: window "9999999999h" is too long: a duration must be under 2562047h47m16.854775807s`},
		{"lower-case method", yamlHead + "  a: {quota: 1, window: 1m, key: ip, ignore_methods: [GET, head]}\n", `c.yaml:3:60: budgets.a.ignore_methods[1]: methods are case-sensitive: "head" never matches; write "HEAD"`},
		{"method listed twice", yamlHead + "  a: {quota: 1, window: 1m, key: ip, ignore_methods: [GET, GET]}\n", `budgets.a.ignore_methods[1]: method "GET" is listed twice`},
		{"not a method", yamlHead + "  a: {quota: 1, window: 1m, key: ip, ignore_methods: [\"GET HEAD\"]}\n", `"GET HEAD" is not a method name`},
		{"shadow not a boolean", yamlHead + "  a: {quota: 1, window: 1m, key: ip, shadow: yes}\n", `c.yaml:3:46: budgets.a.shadow: shadow "yes" must be true or false`},
		{"unknown failure mode", yamlHead + "  a: {quota: 1, window: 1m, key: ip, failure_mode: fail-open}\n", `failure_mode: unknown failure mode "fail-open" (want inherit, open, closed or local)`},
		{"unknown quota_by", yamlHead + "  a: {quota: 1, window: 1m, key: ip, quota_by: tiers2}\n", `c.yaml:3:48: budgets.a.quota_by: unknown quota_by "tiers2"`},
		{"quota by tier without tiers", yamlHead + "  a: {quota: 1, window: 1m, key: tenant, quota_by: tier}\n", `c.yaml:3:52: budgets.a.quota_by: quota_by is tier but no tiers are defined`},
		{"subject on a flat budget", yamlHead + "  a: {quota: 1, window: 1m, key: apikey, subject: org}\n", `c.yaml:3:51: budgets.a.subject: subject applies to quota_by tier and plan only`},
		{"name not printable ASCII", yamlHead + "  \"é\": {quota: 1, window: 1m, key: ip}\n", `c.yaml:3:3: budgets["é"]: name contains byte 0xc3`},
		{"sliding log too large", yamlHead + "  a: {algorithm: sliding_log, quota: 200000, window: 1m, key: ip}\n", `c.yaml:3:3: budgets.a: quota 200000 exceeds 100000, the largest a sliding log keeps`},
		{"merge key", "base: &b {window: 1m, key: ip}\nbudgets:\n  a: {<<: *b, quota: 1}\n", `merge keys (<<) are not supported`},
		{"env name invalid", yamlHead + "  a: {quota: {env: 1X}, window: 1m, key: ip}\n", `c.yaml:3:20: budgets.a.quota.env: env must name an environment variable`},
		{"env unknown field", yamlHead + "  a: {quota: {env: X, defualt: 1}, window: 1m, key: ip}\n", `c.yaml:3:23: budgets.a.quota.defualt: unknown field "defualt" in an environment reference (did you mean "default"?)`},
		{"env default not a value", yamlHead + "  a: {quota: {env: X, default: [1]}, window: 1m, key: ip}\n", `the default of quota must be a plain value`},
		{"mapping without env", yamlHead + "  a: {quota: {value: 1}, window: 1m, key: ip}\n", `budgets.a.quota: quota must be a value or {env: NAME, default: VALUE}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.doc), testOptions(t, nil, nil))
			assertProblem(t, err, tc.want)
		})
	}
}

const tiersHead = "tiers:\n  small: {share: 25%, up_to: 100}\n  xl: {share: 200%}\n" // lines 1-3

func TestTierPlanLayerMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"tier without share", "tiers:\n  small: {up_to: 100}\n" + yamlHead, `c.yaml:2:3: tiers.small: tier "small" has no share`},
		{"ambiguous share", "tiers:\n  small: {share: 25, up_to: 100}\n" + yamlHead, `c.yaml:2:18: tiers.small.share: share "25" is ambiguous: write 25% for a percentage, or 25/1 for 25 times the reference`},
		{"share too large", "tiers:\n  small: {share: 200000%, up_to: 100}\n" + yamlHead, `c.yaml:2:18: tiers.small.share: share "200000%": share 200000/100 is more than 1000 times the reference`},
		{"zero share", "tiers:\n  small: {share: 0%, up_to: 100}\n" + yamlHead, `share "0%": share 0/100 is not positive`},
		{"share syntax", "tiers:\n  small: {share: quarter, up_to: 100}\n" + yamlHead, `c.yaml:2:18: tiers.small.share: share "quarter": want a percentage`},
		{"two top tiers", tiersHead + "  max: {share: 400%}\n" + yamlHead, `c.yaml:4:3: tiers.max: tier "max" and tier "xl" both have no up_to`},
		{"same up_to", tiersHead + "  medium: {share: 50%, up_to: 100}\n" + yamlHead, `c.yaml:4:31: tiers.medium.up_to: tier "medium" has the same up_to 100 as tier "small"`},
		{"pinned with up_to", tiersHead + "  max: {share: 400%, pinned_only: true, up_to: 5}\n" + yamlHead, `c.yaml:4:48: tiers.max.up_to: tier "max" is pinned_only`},
		{"up_to zero", "tiers:\n  small: {share: 25%, up_to: 0}\n" + yamlHead, `tiers.small.up_to: up_to 0: leave up_to out`},
		{"unknown tier field", "tiers:\n  small: {share: 25%, upto: 100}\n" + yamlHead, `c.yaml:2:23: tiers.small.upto: unknown field "upto" in tier "small" (did you mean "up_to"?)`},
		{"unknown fallback tier", tiersHead + "tier_fallback: tiny\n" + yamlHead, `c.yaml:4:16: tier_fallback: tier_fallback "tiny" is not a defined tier`},
		{"fallback without tiers", "tier_fallback: small\n" + yamlHead, `c.yaml:1:16: tier_fallback: tier_fallback is set but no tiers are defined`},
		{"tier quota beyond the algorithm", tiersHead + "budgets:\n  a: {algorithm: sliding_log, quota: 60000, window: 1m, key: tenant, quota_by: tier}\n",
			`c.yaml:5:3: budgets.a: tier "xl" (200%) scales quota 60000 to 120000: quota 120000 exceeds 100000`},
		{"plan raises an unknown budget", "plans:\n  pro: {emial_send: 5}\n" + yamlHead, `c.yaml:2:9: plans.pro.emial_send: plan "pro" raises budget "emial_send", which is not defined`},
		{"plan raises a flat budget", "plans:\n  pro: {ok: 5}\n" + yamlHead, `plan "pro" raises budget "ok", whose quota_by is flat, not plan`},
		{"negative increase", "plans:\n  pro: {ok: -5}\n" + yamlHead, `c.yaml:2:13: plans.pro.ok: the increase of plan "pro" for "ok" -5 is below 0`},
		{"plan not a mapping", "plans:\n  pro: 5\n" + yamlHead, `c.yaml:2:8: plans.pro: plan "pro" must map budget names to increases`},
		{"quota by plan without subjects", yamlHead + "  a: {quota: 1, window: 1m, key: org, quota_by: plan}\n", "no subject lookup"},
		{"layer unknown budget", yamlHead + "layers:\n  l: {use: [ok, okk]}\n", `c.yaml:4:17: layers.l.use[1]: unknown budget "okk" (did you mean "ok"?)`},
		{"layer budget twice", yamlHead + "layers:\n  l: {use: [ok, ok]}\n", `c.yaml:4:17: layers.l.use[1]: budget "ok" is listed twice`},
		{"layer without use", yamlHead + "layers:\n  l: {cost: 1}\n", `c.yaml:4:3: layers.l: layer "l" has no use list`},
		{"layer use empty", yamlHead + "layers:\n  l: {use: []}\n", `c.yaml:4:12: layers.l.use: use is empty`},
		{"layer cost too high", yamlHead + "layers:\n  l: {use: [ok], cost: 11}\n", `c.yaml:4:24: layers.l.cost: cost 11 in budget "ok" exceeds what the budget can ever hold (10)`},
		{"layer cost beyond the smallest tier", tiersHead + "budgets:\n  t: {quota: 10, window: 1m, key: tenant, quota_by: tier}\nlayers:\n  l: {use: [t], costs: {t: 4}}\n",
			`c.yaml:7:28: layers.l.costs.t: cost 4 in budget "t" exceeds what the budget holds in its smallest tier (3)`},
		{"layer cost for an unused budget", yamlHead + "layers:\n  l: {use: [ok], costs: {other: 1}}\n", `c.yaml:4:26: layers.l.costs.other: a cost is set for budget "other", which the layer does not use`},
		{"layer negative cost", yamlHead + "layers:\n  l: {use: [ok], cost: -1}\n", `c.yaml:4:24: layers.l.cost: cost -1 is below 0`},
		{"layer unknown field", yamlHead + "layers:\n  l: {uses: [ok]}\n", `c.yaml:4:7: layers.l.uses: unknown field "uses" in layer "l" (did you mean "use"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(t, nil, nil)
			if tc.name == "quota by plan without subjects" {
				opts.Subjects = nil
			}
			_, err := Parse("c.yaml", []byte(tc.doc), opts)
			assertProblem(t, err, tc.want)
		})
	}
}

// TestJSONMistakes checks that JSON problems are located by JSONPath.
func TestJSONMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"syntax", `{"budgets": {"a": }}`, `c.json:1:19: invalid JSON`},
		{"syntax on line 3", "{\n  \"budgets\": {\n    \"a\": {,}\n}}", `c.json:3:11: invalid JSON`},
		{"truncated", `{"budgets": {"a": {"quota": 1`, `c.json:1:30: invalid JSON: unexpected end of the document`},
		{"trailing data", `{"budgets": {}} {}`, `invalid JSON: unexpected data after the top-level value`},
		{"empty", ``, `c.json: $: the document is empty`},
		{"wrong quota type", `{"budgets": {"a": {"quota": "lots", "window": "1m", "key": "ip"}}}`, `c.json: $.budgets.a.quota: quota "lots" is not a whole number`},
		{"fractional quota", `{"budgets": {"a": {"quota": 2.5, "window": "1m", "key": "ip"}}}`, `c.json: $.budgets.a.quota: quota "2.5" is not a whole number`},
		{"unknown field", `{"budgets": {"a": {"quota": 1, "window": "1m", "key": "ip", "burts": 3}}}`, `c.json: $.budgets.a.burts: unknown field "burts" in budget "a" (did you mean "burst"?)`},
		{"duplicate key", `{"budgets": {"a": {"quota": 1, "quota": 2, "window": "1m", "key": "ip"}}}`, `c.json: $.budgets.a.quota: "quota" is defined twice`},
		{"odd name", `{"budgets": {"a b": {"quota": 0, "window": "1m", "key": "ip"}}}`, `c.json: $.budgets["a b"].quota: quota 0 is below 1`},
		{"list item", `{"budgets": {"a": {"quota": 1, "window": "1m", "key": "ip", "ignore_methods": ["GET", 5, "get"]}}}`, `c.json: $.budgets.a.ignore_methods[2]: methods are case-sensitive`},
		{"env", `{"budgets": {"a": {"quota": {"env": "Q"}, "window": "1m", "key": "ip"}}}`, `c.json: $.budgets.a.quota: environment variable Q="": is not set`},
		{"layer", `{"budgets": {"a": {"quota": 1, "window": "1m", "key": "ip"}}, "layers": {"l": {"use": ["b"]}}}`, `c.json: $.layers.l.use[0]: unknown budget "b"`},
		{"boolean", `{"budgets": {"a": {"quota": 1, "window": "1m", "key": "ip", "shadow": "true "}}}`, `c.json: $.budgets.a.shadow: shadow "true " must be true or false`},
		{"null", `{"budgets": {"a": {"quota": null, "window": "1m", "key": "ip"}}}`, `c.json: $.budgets.a.quota: quota is empty`},
		{"deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), `too deeply nested`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.json", []byte(tc.doc), testOptions(t, nil, nil))
			assertProblem(t, err, tc.want)
		})
	}
}

// Every problem is reported, not just the first.
func TestAllProblemsReported(t *testing.T) {
	doc := `budgets:
  a: {quota: -1, window: 1m, key: ip}
  b: {quota: 1, window: soon, key: ip}
  c: {quota: 1, window: 1m, key: nobody}
  d: {quota: 1, window: 1m, key: ip, colour: red}
layers:
  l: {use: [zz]}
`
	_, err := Parse("many.yaml", []byte(doc), testOptions(t, nil, nil))
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
	want := []string{"many.yaml:2:14:", "many.yaml:3:25:", "many.yaml:4:34:", "many.yaml:5:38:", "many.yaml:7:13:"}
	if len(ce.Problems) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(ce.Problems), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(ce.Problems[i].Error(), w) {
			t.Errorf("problem %d = %q, want it at %s", i, ce.Problems[i], w)
		}
	}
}

func TestFormatDetection(t *testing.T) {
	opts := testOptions(t, nil, nil)
	doc := `{"budgets": {"a": {"quota": 1, "window": "1m", "key": "ip"}}}`
	for _, name := range []string{"x.json", "x.conf", "x"} {
		if _, err := Parse(name, []byte(doc), opts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// JSON is valid YAML too; a .yaml name reads it as YAML, with lines.
	_, err := Parse("x.yaml", []byte(`{"budgets": {"a": {"quota": 0, "window": "1m", "key": "ip"}}}`), opts)
	assertProblem(t, err, "x.yaml:1:29: budgets.a.quota")
	opts.Format = FormatJSON
	_, err = Parse("x.yaml", []byte(`{"budgets": {"a": {"quota": 0, "window": "1m", "key": "ip"}}}`), opts)
	assertProblem(t, err, "x.yaml: $.budgets.a.quota")
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml"), testOptions(t, nil, nil)); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxDocumentSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(big, testOptions(t, nil, nil))
	assertProblem(t, err, "larger than")
}

func TestLayerOptions(t *testing.T) {
	doc := yamlHead + "  b: {quota: 10, window: 1m, key: ip}\nlayers:\n  l: {use: [ok, b], cost: 2, costs: {b: 0}}\n"
	cfg, err := Parse("l.yaml", []byte(doc), testOptions(t, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.LayerNames(); len(got) != 1 || got[0] != "l" {
		t.Fatalf("layers %v", got)
	}
	store := memstore.MustNew(memstore.Config{Clock: newFakeClock(), SweepInterval: -1})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	l, err := cfg.Layer(eng, "l")
	if err != nil {
		t.Fatal(err)
	}
	d := take(l, req("GET"))
	if !d.Allowed || len(d.Results) != 2 || d.Results[0].Cost != 2 || d.Results[1].Cost != 0 {
		t.Fatalf("decision %+v", d.Results)
	}
	if _, err := cfg.Layer(eng, "nope"); err == nil {
		t.Error("unknown layer: no error")
	}
}

func TestBadEnvironmentVariableReportedOnce(t *testing.T) {
	doc := `budgets:
  login:  {quota: {env: PUBLIC_RATE_LIMIT, default: 20}, window: 1m, key: ip}
  signup: {quota: {env: PUBLIC_RATE_LIMIT, default: 20}, window: 1m, key: ip}
  forms:  {quota: {env: PUBLIC_RATE_LIMIT, default: 20}, window: {env: PUBLIC_RATE_WINDOW, default: 1m}, key: ip}
`
	_, err := Parse("p.yaml", []byte(doc), testOptions(t, map[string]string{"PUBLIC_RATE_LIMIT": "x", "PUBLIC_RATE_WINDOW": "y"}, nil))
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v", err)
	}
	if len(ce.Problems) != 2 {
		t.Fatalf("%d problems, want one per bad variable:\n%v", len(ce.Problems), err)
	}
	assertProblem(t, err, `p.yaml:2:19: budgets.login.quota: environment variable PUBLIC_RATE_LIMIT="x"`)
	assertProblem(t, err, `environment variable PUBLIC_RATE_WINDOW="y"`)
}
