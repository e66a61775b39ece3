package policy

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
)

// fuzzEnv is the environment the fuzzed documents see.
var fuzzEnv = map[string]string{"PUBLIC_RATE_LIMIT": "20", "PUBLIC_RATE_WINDOW": "1m", "BAD": "x", "EMPTY": ""}

func fuzzParse(t *testing.T, name string, data []byte) {
	opts := testOptions(t, fuzzEnv, map[string]Subject{})
	cfg, err := Parse(name, data, opts)
	if err != nil {
		var ce *core.ConfigError
		if !errors.As(err, &ce) || len(ce.Problems) == 0 {
			t.Fatalf("error %T %v is not a *core.ConfigError with problems", err, err)
		}
		for _, p := range ce.Problems {
			var pr *Problem
			if !errors.As(p, &pr) || pr.File != name || pr.Err == nil || pr.Err.Error() == "" {
				t.Fatalf("problem %#v is not a located *Problem", p)
			}
			if !strings.HasPrefix(p.Error(), name+":") {
				t.Fatalf("problem %q does not start with its location", p)
			}
		}
		return
	}
	// Whatever the loader accepts, the engine accepts, layers included.
	store := core.MustMemoryStore(core.MemoryConfig{SweepInterval: -1})
	defer store.Close()
	eng, err := core.New(core.Config{Store: store, Fallback: store, Budgets: cfg.Budgets()})
	if err != nil {
		t.Fatalf("accepted configuration rejected by the engine: %v\n%s", err, data)
	}
	for _, name := range cfg.LayerNames() {
		l, err := cfg.Layer(eng, name)
		if err != nil {
			t.Fatalf("accepted layer %q rejected by the engine: %v\n%s", name, err, data)
		}
		var d core.Decision
		l.Decide(req("POST", "X-Tenant", "t", "X-Operator", "o", "X-Org", "o", "X-Api-Key", "k", "X-Subscriber", "s"), &d)
	}
}

func fuzzSeeds(f *testing.F, files ...string) {
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

func FuzzParseYAML(f *testing.F) {
	fuzzSeeds(f, "testdata/seed004.yaml")
	for _, doc := range []string{
		yamlHead,
		tiersHead + "budgets:\n  t: {quota: 10, window: 1m, key: tenant, scaling: tier}\nlayers:\n  l: {use: [t], costs: {t: 3}}\n",
		"plans:\n  pro: {b: 5}\nbudgets:\n  b: {quota: 5, window: 1s, key: org, scaling: plan, algorithm: token_bucket, burst: 2}\n",
		"budgets:\n  b: {quota: {env: PUBLIC_RATE_LIMIT, default: 20}, window: {env: BAD}, key: ip}\n",
		"budgets:\n  b: {algorithm: leaky_bucket, quota: 10, window: 1s, max_wait: 100ms, key: ip, missing_key: fallback, fallback_key: global}\n",
		"a: &x {quota: 1, window: 1m, key: ip}\nbudgets:\n  b: *x\n  c: *x\n",
		"budgets:\n  b: {quota: 1, window: 1m, key: ip, ignore_methods: [GET, get, \"\"]}\n",
		"budgets:\n  b: {quota: 100, window: 1s, key: ip, lease: {max: 10, ttl: 250ms}}\n",
		"budgets:\n  b: {algorithm: sliding_log, quota: 100, window: 1s, key: ip, lease: {ttl: 5ms, max: -1, x: 1}}\n",
		"budgets: [1, 2]\n",
		"budgets:\n  ? [a]\n  : 1\n",
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, "f.yaml", data) })
}

func FuzzParseJSON(f *testing.F) {
	fuzzSeeds(f, "testdata/seed002.json")
	for _, doc := range []string{
		`{"budgets": {"a": {"quota": 1, "window": "1m", "key": "ip"}}}`,
		`{"budgets": {"a": {"quota": {"env": "PUBLIC_RATE_LIMIT"}, "window": "1m", "key": "ip", "shadow": true}}, "layers": {"l": {"use": ["a"], "cost": 0}}}`,
		`{"tiers": {"s": {"share": "1/3", "up_to": 5}, "x": {"share": 2}}, "tier_fallback": "s", "budgets": {"a": {"quota": 10, "window": "1m", "key": "tenant", "scaling": "tier"}}}`,
		`{"budgets": {"a": {"quota": 1e3, "window": "1m", "key": "ip"}}}`,
		`{"budgets": {"a": {"quota": 1, "quota": 1}}}`,
		`{"budgets": {"\u00e9": {}}}`,
		`{"budgets": {"a": {"quota": 10, "window": "1s", "key": "ip", "algorithm": "token_bucket", "lease": {"max": 5, "ttl": "100ms"}}}}`,
		`[[[[]]]]`,
		`{"budgets": {}} trailing`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, "f.json", data) })
}
