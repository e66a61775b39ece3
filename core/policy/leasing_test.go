package policy

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

func TestLeasing(t *testing.T) {
	doc := "budgets:\n  hot: {quota: 1000, window: 1s, key: tenant, leasing: {max: 50, ttl: 200ms}}\n" +
		`  js: {"quota": 10, "window": "1m", "key": "ip", "algorithm": "token_bucket", "leasing": {"max": 5}}` + "\n"
	cfg, err := Parse("c.yaml", []byte(doc), testOptions(t, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]core.Leasing{}
	for _, b := range cfg.Budgets() {
		got[b.Name] = b.Leasing
	}
	if want := (core.Leasing{Max: 50, TTL: 200 * time.Millisecond}); got["hot"] != want {
		t.Errorf("hot: lease %+v, want %+v", got["hot"], want)
	}
	if want := (core.Leasing{Max: 5}); got["js"] != want {
		t.Errorf("js: lease %+v, want %+v", got["js"], want)
	}
}

func TestLeasingMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"no max", yamlHead + "  a: {quota: 1, window: 1m, key: ip, leasing: {ttl: 1s}}\n", `c.yaml:3:47: budgets.a.leasing: leasing has no max`},
		{"max zero", yamlHead + "  a: {quota: 1, window: 1m, key: ip, leasing: {max: 0}}\n", `c.yaml:3:53: budgets.a.leasing.max: leasing max 0 is below 1`},
		{"ttl too short", yamlHead + "  a: {quota: 1, window: 1m, key: ip, leasing: {max: 5, ttl: 5ms}}\n", `c.yaml:3:61: budgets.a.leasing.ttl: lease TTL 5ms is outside [10ms, 10s]`},
		{"ttl without unit", yamlHead + "  a: {quota: 1, window: 1m, key: ip, leasing: {max: 5, ttl: 100}}\n", `budgets.a.leasing.ttl: leasing ttl "100" is not a duration`},
		{"unknown field", yamlHead + "  a: {quota: 1, window: 1m, key: ip, leasing: {max: 5, tll: 1s}}\n", `c.yaml:3:56: budgets.a.leasing.tll: unknown field "tll" in budget "a"'s leasing (did you mean "ttl"?)`},
		{"sliding log", yamlHead + "  a: {algorithm: sliding_log, quota: 1, window: 1m, key: ip, leasing: {max: 5}}\n", `c.yaml:3:71: budgets.a.leasing: sliding_log cannot be leased`},
		{"leaky bucket", yamlHead + "  a: {algorithm: leaky_bucket, quota: 1, window: 1m, max_wait: 1s, key: ip, leasing: {max: 5}}\n", `budgets.a.leasing: leaky_bucket cannot be leased`},
		{"not a mapping", yamlHead + "  a: {quota: 1, window: 1m, key: ip, leasing: 5}\n", `c.yaml:3:47: budgets.a.leasing: budget "a"'s leasing must be a mapping`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.doc), testOptions(t, nil, nil))
			assertProblem(t, err, tc.want)
		})
	}
}

// A concurrency budget's lease (a duration) and a budget's leasing are
// different fields: leasing a concurrency budget is refused.
func TestLeasingConcurrency(t *testing.T) {
	doc := yamlHead + "  a: {algorithm: concurrency, quota: 5, lease: 10m, key: ip, leasing: {max: 5}}\n"
	_, err := Parse("c.yaml", []byte(doc), testOptions(t, nil, nil))
	assertProblem(t, err, `budgets.a.leasing: concurrency cannot be leased`)
}
