package policy

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// A concurrency budget in a configuration file: algorithm concurrency, a
// quota of slots and a lease instead of a window.
func TestConcurrencyBudget(t *testing.T) {
	for name, doc := range map[string]string{
		"c.yaml": "budgets:\n  exports: {algorithm: concurrency, quota: 4, lease: 10m, key: tenant}\n",
		"c.json": `{"budgets": {"exports": {"algorithm": "concurrency", "quota": 4, "lease": "10m", "key": "tenant"}}}`,
	} {
		cfg, err := Parse(name, []byte(doc), testOptions(t, nil, nil))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := cfg.Budgets()[0]
		if b.Algorithm != core.Concurrency || b.Quota != 4 || b.Window != 10*time.Minute {
			t.Errorf("%s: %+v", name, b)
		}
	}
}

func TestConcurrencyMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"window instead of lease", yamlHead + "  a: {algorithm: concurrency, quota: 4, window: 1m, key: ip}\n",
			`c.yaml:3:49: budgets.a.window: budget "a" is a concurrency budget and has no window; set lease`},
		{"no lease", yamlHead + "  a: {algorithm: concurrency, quota: 4, key: ip}\n",
			`c.yaml:3:3: budgets.a: budget "a" is a concurrency budget and needs a lease`},
		{"lease on a window budget", yamlHead + "  a: {quota: 4, window: 1m, lease: 1m, key: ip}\n",
			`c.yaml:3:36: budgets.a.lease: lease applies to concurrency only, not fixed_window (use window)`},
		{"lease without unit", yamlHead + "  a: {algorithm: concurrency, quota: 4, lease: 60, key: ip}\n",
			`c.yaml:3:48: budgets.a.lease: lease "60" is not a duration with a unit`},
		{"too many slots", yamlHead + "  a: {algorithm: concurrency, quota: 200000, lease: 1m, key: ip}\n",
			`c.yaml:3:3: budgets.a: quota 200000 exceeds 100000, the most slots a concurrency budget holds`},
		{"burst on concurrency", yamlHead + "  a: {algorithm: concurrency, quota: 4, lease: 1m, burst: 2, key: ip}\n",
			`budgets.a.burst: burst applies to token_bucket and leaky_bucket only, not concurrency`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.doc), testOptions(t, nil, nil))
			assertProblem(t, err, tc.want)
		})
	}
}
