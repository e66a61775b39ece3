package core_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

func TestLeaseValidation(t *testing.T) {
	base := core.Budget{Name: "b", Quota: 10, Window: time.Second, Key: remoteAddrKey}
	for _, tc := range []struct {
		name  string
		edit  func(b *core.Budget)
		wants []string
	}{
		{"negative max", func(b *core.Budget) { b.Leasing.Max = -1 }, []string{`budget "b": lease max -1 is negative`}},
		{"ttl without max", func(b *core.Budget) { b.Leasing.TTL = time.Second }, []string{`budget "b": lease TTL is set but lease max is 0`}},
		{"ttl too long", func(b *core.Budget) { b.Leasing = core.Leasing{Max: 5, TTL: time.Minute} }, []string{`budget "b": lease TTL 1m0s is outside [10ms, 10s]`}},
		{"sliding log", func(b *core.Budget) { b.Algorithm, b.Leasing.Max = core.SlidingLog, 5 }, []string{`budget "b": sliding_log cannot be leased`}},
		{"concurrency", func(b *core.Budget) { b.Algorithm, b.Leasing.Max = core.Concurrency, 5 }, []string{`budget "b": concurrency cannot be leased`}},
		{"leaky bucket, every problem", func(b *core.Budget) {
			b.Algorithm, b.MaxWait, b.Leasing = core.LeakyBucket, time.Second, core.Leasing{Max: 5, TTL: time.Millisecond}
		}, []string{`lease TTL 1ms is outside`, `leaky_bucket cannot be leased`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base
			tc.edit(&b)
			_, err := core.New(core.Config{Store: newStore(t, nil), Budgets: []core.Budget{b}})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestLeaseDefaults: a leased budget's Limit carries its lease with the
// default TTL, and the memory store, already local, decides it exactly as
// without leasing.
func TestLeaseDefaults(t *testing.T) {
	clk := newFakeClock(time.Unix(1_700_000_000, 0))
	leased := core.Budget{Name: "l", Quota: 3, Window: time.Minute, Key: remoteAddrKey, Leasing: core.Leasing{Max: 100}}
	plain := core.Budget{Name: "p", Quota: 3, Window: time.Minute, Key: remoteAddrKey}
	eng, _ := newEngine(t, clk, leased, plain)
	for _, name := range []string{"l", "p"} {
		layer := eng.MustLayer(core.Use(name))
		var got []bool
		for i := 0; i < 4; i++ {
			var d core.Decision
			layer.Decide(request("GET", "10.0.0.1:1"), &d)
			got = append(got, d.Allowed)
			if name == "l" && d.Results[0].Limit.Leasing != (core.Leasing{Max: 100, TTL: core.DefaultLeaseTTL}) {
				t.Errorf("limit's lease %+v", d.Results[0].Limit.Leasing)
			}
		}
		if want := []bool{true, true, true, false}; !slices.Equal(got, want) {
			t.Errorf("budget %s: allowed %v, want %v", name, got, want)
		}
	}
}
