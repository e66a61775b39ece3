package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/quotagate/quotagate/core"
)

// FuzzHeaderRoundTrip renders the IETF fields for arbitrary budget names
// and numbers and parses them back with an independent RFC 9651 parser.
func FuzzHeaderRoundTrip(f *testing.F) {
	f.Add("t_mutate", int64(300), int64(60_000), int64(1), "email_send", int64(1000))
	f.Add(`quote"and\backslash`, int64(1), int64(1), int64(0), " ", int64(999_999_999_999_999))
	f.Add("a,b;c=d", int64(5), int64(1500), int64(5), "~!@#$%^&*()", int64(7))
	f.Fuzz(func(t *testing.T, name1 string, quota1, windowMS, cost int64, name2 string, quota2 int64) {
		c := newFakeClock(t0.Add(17 * time.Second))
		budgets := []core.Budget{
			{Name: name1, Quota: quota1, Window: time.Duration(windowMS) * time.Millisecond, Key: remoteAddrKey},
			{Name: name2, Quota: quota2, Window: time.Minute, Key: remoteAddrKey},
		}
		e, err := core.New(core.Config{Store: newStore(t, c), Budgets: budgets, Clock: c})
		if err != nil {
			return // invalid configurations are rejected, not rendered
		}
		l, err := e.Layer(core.Use(name1, name2), core.CostIn(name1, cost))
		if err != nil {
			return
		}
		d := decide(l, request("GET", "k"))
		fields := l.Fields(d)
		for _, field := range []string{core.HeaderPolicy, core.HeaderRateLimit} {
			v := fields.Get(field)
			list, err := httpsfv.UnmarshalList([]string{v})
			if err != nil {
				t.Fatalf("%s: %q does not parse: %v", field, v, err)
			}
			if len(list) != 2 {
				t.Fatalf("%s: %d members in %q", field, len(list), v)
			}
			for i, m := range list {
				item := m.(httpsfv.Item)
				if item.Value != budgets[i].Name {
					t.Fatalf("%s: member %d names %q, want %q", field, i, item.Value, budgets[i].Name)
				}
				for _, p := range item.Params.Names() {
					v, _ := item.Params.Get(p)
					if n, ok := v.(int64); !ok || n < 0 {
						t.Fatalf("%s: %s=%v", field, p, v)
					}
				}
			}
			if field == core.HeaderPolicy {
				q, _ := list[0].(httpsfv.Item).Params.Get("q")
				if q != quota1 {
					t.Fatalf("q=%v, want %d", q, quota1)
				}
			}
		}
	})
}

func TestLegacyHeaderStyles(t *testing.T) {
	c := newFakeClock(t0.Add(20 * time.Second))
	e, _ := newEngine(t, c,
		core.Budget{Name: "loose", Quota: 100, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "tight", Quota: 4, Window: time.Minute, Key: remoteAddrKey},
	)
	cases := []struct {
		style      core.HeaderStyle
		names      [3]string
		wantValues [3]string
	}{
		{core.HeadersDraft, [3]string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"}, [3]string{"4", "3", "40"}},
		{core.HeadersX, [3]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}, [3]string{"4", "2", "40"}},
		{core.HeadersXEpoch, [3]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}, [3]string{"4", "1", "1796040060"}},
	}
	for _, tc := range cases {
		l := e.MustLayer(core.Use("loose", "tight"), core.Headers(tc.style))
		f := l.Fields(decide(l, request("GET", "k")))
		if f.Len() != 3 {
			t.Fatalf("style %d: %d fields", tc.style, f.Len())
		}
		for i := 0; i < 3; i++ {
			name, value := f.Field(i)
			if name != tc.names[i] || value != tc.wantValues[i] {
				t.Errorf("style %d field %d: %s: %s, want %s: %s", tc.style, i, name, value, tc.names[i], tc.wantValues[i])
			}
		}
	}
	l := e.MustLayer(core.Use("loose"), core.Headers(core.HeadersNone))
	if f := l.Fields(decide(l, request("GET", "k"))); f.Len() != 0 {
		t.Fatal("HeadersNone rendered fields")
	}
}

func TestRetryAfterRoundsUpAndIsAtLeastOne(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Microsecond, 1}, {time.Second, 1}, {time.Second + time.Microsecond, 2}, {59*time.Second + 999*time.Millisecond, 60}} {
		if got := core.RetryAfterSeconds(&core.Decision{RetryAfter: tc.d}); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestExhaustedBudgetReportsTAtLeastOne(t *testing.T) {
	// A token bucket exhausted with 0.4 s to the next token reports r=0;t=1.
	c := newFakeClock(t0)
	e, _ := newEngine(t, c, core.Budget{Name: "tb", Algorithm: core.TokenBucket, Quota: 10, Window: 4 * time.Second, Burst: 1, Key: remoteAddrKey})
	l := e.MustLayer(core.Use("tb"))
	decide(l, request("GET", "k"))
	c.Advance(200 * time.Millisecond)
	d := decide(l, request("GET", "k"))
	f := l.Fields(d)
	if got := f.Get(core.HeaderRateLimit); got != `"tb";r=0;t=1` {
		t.Fatalf("RateLimit %q", got)
	}
	if d.RetryAfter != 200*time.Millisecond || core.RetryAfterSeconds(d) != 1 {
		t.Fatalf("retry after %v", d.RetryAfter)
	}
	if !strings.Contains(string(l.Deny(request("GET", "k"), d).Body), `"retry-after":1`) {
		t.Fatal("problem body lacks retry-after")
	}
}

func TestPolicyPreRendered(t *testing.T) {
	c := newFakeClock(t0.Add(17 * time.Second))
	budgets := []core.Budget{
		{Name: "static", Quota: 5, Window: time.Minute, Key: remoteAddrKey},
		{Name: "tiered", Quota: 10, Window: time.Hour, Key: remoteAddrKey,
			QuotaFunc: func(*core.Request, string) (int64, error) { return 40, nil }},
		{Name: "bucket", Algorithm: core.TokenBucket, Quota: 3, Window: time.Second, Burst: 6, Key: remoteAddrKey},
		{Name: "shadow", Quota: 1, Window: time.Minute, Key: remoteAddrKey, Shadow: true},
	}
	e, _ := newEngine(t, c, budgets...)
	// A single budget at its configured quota renders RateLimit-Policy
	// without formatting it.
	l := e.MustLayer(core.Use("static"))
	f := l.Fields(decide(l, request("GET", "other")))
	if _, v := f.Field(0); v != `"static";q=5;w=60` || !f.Static(0) {
		t.Fatalf("policy %q, pre-rendered %v", v, f.Static(0))
	}
	// A resolved quota is formatted.
	l = e.MustLayer(core.Use("tiered"))
	f = l.Fields(decide(l, request("GET", "other")))
	if _, v := f.Field(0); v != `"tiered";q=40;w=3600` || f.Static(0) {
		t.Fatalf("resolved policy %q, pre-rendered %v", v, f.Static(0))
	}
}
