package core_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// policyOf formats the RateLimit-Policy d should carry from its public
// fields alone: every non-shadow result under the limit it was decided with.
func policyOf(d *core.Decision) string {
	var b strings.Builder
	for _, r := range d.Results {
		if r.Shadow {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(r.Budget)) // names here need no escaping beyond Go's
		b.WriteString(";q=" + strconv.FormatInt(r.Limit.Quota, 10))
		b.WriteString(";w=" + strconv.FormatInt(int64((r.Limit.Window+time.Second-1)/time.Second), 10))
	}
	return b.String()
}

// TestPolicyAcrossEnginesAndReload checks the pre-rendered policy members
// against the limits each result was decided with: stacked layers of two
// engines that both define a budget of the same name, a Reload between
// the layers of one request, a failed-open budget and a resolved quota.
func TestPolicyAcrossEnginesAndReload(t *testing.T) {
	c := newFakeClock(t0.Add(17 * time.Second))
	fs := &flakyStore{Store: newStore(t, c)}
	e1 := core.MustNew(core.Config{Store: newStore(t, c), Clock: c, Budgets: []core.Budget{
		{Name: "a", Quota: 5, Window: time.Minute, Key: remoteAddrKey},
		{Name: "c", Quota: 3, Window: 90 * time.Second, Key: remoteAddrKey},
	}})
	e2 := core.MustNew(core.Config{Store: fs, Clock: c, BreakerThreshold: -1, Budgets: []core.Budget{
		{Name: "a", Quota: 7, Window: time.Minute, Key: remoteAddrKey},
		{Name: "tier", Quota: 10, Window: time.Hour, Key: remoteAddrKey,
			QuotaFunc: func(r *core.Request, _ string) (int64, error) {
				if r.Path == "/gold" {
					return 40, nil
				}
				return 10, nil // the configured quota: pre-rendered member
			}},
		{Name: "sh", Quota: 1, Window: time.Minute, Key: remoteAddrKey, Shadow: true},
	}})
	l1 := e1.MustLayer(core.Use("a"))
	l1c := e1.MustLayer(core.Use("c"))
	l2 := e2.MustLayer(core.Use("a", "tier", "sh"))

	check := func(name string, l *core.Layer, d *core.Decision, want string) {
		t.Helper()
		f := l.Fields(d)
		if got := f.Get(core.HeaderPolicy); got != want || got != policyOf(d) {
			t.Fatalf("%s: RateLimit-Policy %q, want %q (from the results: %q)", name, got, want, policyOf(d))
		}
	}

	// Two engines, one budget name each, on one request.
	for _, path := range []string{"/", "/gold"} {
		var d core.Decision
		r := &core.Request{Method: "GET", Path: path, RemoteAddr: "k"}
		l1.Decide(r, &d)
		l2.Decide(r, &d)
		tier := `"tier";q=10;w=3600`
		if path == "/gold" {
			tier = `"tier";q=40;w=3600`
		}
		check("stacked "+path, l2, &d, `"a";q=5;w=60, "a";q=7;w=60, `+tier)
		if f := l2.Fields(&d); strings.Count(f.Get(core.HeaderRateLimit), `"a";`) != 2 {
			rl := f.Get(core.HeaderRateLimit)
			t.Fatalf("RateLimit %q: want both budgets named a", rl)
		}
	}

	// A Reload between the layers of one request: the outer result keeps
	// the limit it was decided with.
	var d core.Decision
	r := request("GET", "k2")
	l1.Decide(r, &d)
	if err := e1.Reload([]core.Budget{
		{Name: "a", Quota: 9, Window: 2 * time.Minute, Key: remoteAddrKey},
		{Name: "c", Quota: 3, Window: 90 * time.Second, Key: remoteAddrKey},
	}); err != nil {
		t.Fatal(err)
	}
	l1c.Decide(r, &d)
	check("reload mid-request", l1c, &d, `"a";q=5;w=60, "c";q=3;w=90`)
	check("after reload", l1, decide(l1, request("GET", "k3")), `"a";q=9;w=120`)

	// A failed-open budget is listed in the policy, not in RateLimit.
	fs.down.Store(true)
	d = core.Decision{}
	l1.Decide(r, &d)
	l2.Decide(r, &d)
	check("failed open", l2, &d, `"a";q=9;w=120, "a";q=7;w=60, "tier";q=10;w=3600`)
	f := l2.Fields(&d)
	if rl := f.Get(core.HeaderRateLimit); strings.Count(rl, `"a";`) != 1 || strings.Contains(rl, "tier") {
		t.Fatalf("RateLimit %q lists budgets whose store failed", rl)
	}
}
