package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// fuzzEnv is the environment the fuzzed documents see.
var fuzzEnv = map[string]string{"PUBLIC_RATE_LIMIT": "20", "PUBLIC_RATE_WINDOW": "1m", "BAD": "x", "EMPTY": ""}

func fuzzParse(t *testing.T, name string, data []byte) {
	// With a subject lookup, and with only the subjects the file assigns.
	opts := testOptions(t, fuzzEnv, map[string]Subject{})
	opts.Signals = map[string]func() float64{"cpu": func() float64 { return 0.5 }}
	fuzzParseWith(t, name, data, opts)
	opts.Subjects = nil
	fuzzParseWith(t, name, data, opts)
}

func fuzzParseWith(t *testing.T, name string, data []byte, opts LoadConfig) {
	logger, warned := warningLogger()
	opts.Logger = logger
	cfg, err := Parse(name, data, opts)
	// A warning is located as a problem is.
	for _, w := range warned.list() {
		if !strings.HasPrefix(w, name+":") {
			t.Fatalf("warning %q does not start with its location", w)
		}
	}
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
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
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
		for _, who := range []string{"t", "acme", "initech"} {
			l.Decide(req("POST", "X-Tenant", who, "X-Operator", "o", "X-Org", who, "X-Api-Key", "k", "X-Subscriber", "s"), &d)
			for _, r := range d.Results {
				if r.Limit.Quota < 1 || r.Limit.Quota > core.MaxQuota {
					t.Fatalf("layer %q resolved budget %q to quota %d\n%s", name, r.Budget, r.Limit.Quota, data)
				}
			}
			d.Reset()
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100/min", "5000/hour", "10/s", "300/5m", "3/1500ms", "1/4", "0/min", "100/", "x/y", "100 / minute", "9999999999999999/d", "1/-1s", "1/1ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, w, err := ParseRate(s)
		if err != nil {
			if q != 0 || w != 0 || !strings.HasPrefix(err.Error(), "quota ") {
				t.Fatalf("ParseRate(%q) = %d, %v, %v", s, q, w, err)
			}
			return
		}
		if q < 1 || q > core.MaxQuota || w <= 0 || w%time.Millisecond != 0 {
			t.Fatalf("ParseRate(%q) accepted %d per %v", s, q, w)
		}
		if !isRate(s) {
			t.Fatalf("ParseRate accepts %q, which isRate does not take for a rate", s)
		}
	})
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
		tiersHead + "budgets:\n  t: {quota: 10, window: 1m, key: tenant, quota_by: tier}\nlayers:\n  l: {use: [t], costs: {t: 3}}\n",
		"plans:\n  pro: {b: 5}\nbudgets:\n  b: {quota: 5, window: 1s, key: org, quota_by: plan, algorithm: token_bucket, burst: 2}\n",
		"budgets:\n  b: {quota: {env: PUBLIC_RATE_LIMIT, default: 20}, window: {env: BAD}, key: ip}\n",
		"budgets:\n  b: {algorithm: leaky_bucket, quota: 10, window: 1s, max_wait: 100ms, key: ip, missing_key: fallback, fallback_key: global}\n",
		"a: &x {quota: 1, window: 1m, key: ip}\nbudgets:\n  b: *x\n  c: *x\n",
		"budgets:\n  b: {quota: 1, window: 1m, key: ip, ignore_methods: [GET, get, \"\"]}\n",
		"budgets:\n  b: {quota: 100, window: 1s, key: ip, leasing: {max: 10, ttl: 250ms}}\n",
		"budgets:\n  b: {algorithm: sliding_log, quota: 100, window: 1s, key: ip, leasing: {ttl: 5ms, max: -1, x: 1}}\n",
		"budgets: [1, 2]\n",
		"budgets:\n  ? [a]\n  : 1\n",
		"budgets:\n  c: {algorithm: concurrency, quota: 4, lease: 10m, key: tenant}\n  d: {algorithm: in_flight, quota: 2, window: 1m, lease: 1s, key: ip}\n",
		tenantsDoc,
		"tiers:\n  free: 100/min\n  half: 50%\n  big: {quota: 5/s, up_to: 10}\ntier_fallback: free\nsubjects:\n  acme: {cap: none}\n  initech: {overrides: {api: 3}}\nbudgets:\n  api: {window: 1m, key: tenant, quota_by: tier}\n",
		"budgets:\n  a: {quota: 10, window: 1m, key: ip, scale: {signal: cpu, target: 70%, min: 1/4, step: 0.1, interval: 10ms}}\n",
		"plans:\n  pro: {b: 5}\nbudgets:\n  b: {quota: 5, window: 1s, key: org, scaling: plan}\n  c: {quota: 5, window: 1s, key: org, quota_by: plan, scaling: tier}\n",
		"budgets:\n  a: {algorithm: token_bucket, quota: 10, window: 1s, key: ip, scale: {schedule: {\"Mon-Fri 09:00-18:00\": 50%, \"Fri 22:00-06:00\": 0.25}, zone: Europe/Paris, signal: cpu, target: 2}}\n",
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
		`{"tiers": {"s": {"share": "1/3", "up_to": 5}, "x": {"share": 2}}, "tier_fallback": "s", "budgets": {"a": {"quota": 10, "window": "1m", "key": "tenant", "quota_by": "tier"}}}`,
		`{"budgets": {"a": {"quota": 1e3, "window": "1m", "key": "ip"}}}`,
		`{"budgets": {"a": {"quota": 1, "quota": 1}}}`,
		`{"budgets": {"\u00e9": {}}}`,
		`{"budgets": {"a": {"quota": 10, "window": "1s", "key": "ip", "algorithm": "token_bucket", "leasing": {"max": 5, "ttl": "100ms"}}}}`,
		`[[[[]]]]`,
		`{"budgets": {}} trailing`,
		`{"budgets": {"c": {"algorithm": "concurrency", "quota": 4, "lease": "10m", "key": "tenant"}}, "layers": {"l": {"use": ["c"], "cost": 2}}}`,
		`{"tiers": {"free": "100/min", "pro": {"quota": "1000/min", "pinned_only": true}}, "tier_fallback": "free", "subjects": {"acme": "pro", "initech": {"tier": "pro", "overrides": {"api": 7}}}, "budgets": {"api": {"window": "1m", "key": "tenant", "quota_by": "tier"}}}`,
		`{"budgets": {"a": {"quota": 10, "window": "1m", "key": "ip", "scale": {"signal": "cpu", "target": 0.7, "schedule": {"Sat,Sun 00:00-24:00": "25%"}, "zone": "UTC"}}}}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, "f.json", data) })
}
