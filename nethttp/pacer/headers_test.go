package pacer

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/nethttp"
)

var clientNow = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	later := clientNow.Add(90 * time.Second)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{" 120 ", 120 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0.25", 250 * time.Millisecond, true},
		{".5", 500 * time.Millisecond, true},
		{"3.", 3 * time.Second, true},
		{"0.0000000001", time.Nanosecond, true}, // below a nanosecond rounds up
		{"99999999999999999999", maxSignal, true},
		{later.Format(http.TimeFormat), 90 * time.Second, true},                  // IMF-fixdate
		{later.Format("Monday, 02-Jan-06 15:04:05 GMT"), 90 * time.Second, true}, // RFC 850
		{later.Format(time.ANSIC), 90 * time.Second, true},                       // asctime
		{clientNow.Add(-time.Hour).Format(http.TimeFormat), 0, true},             // past date: no wait
		{"", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1e3", 0, false},
		{"5s", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"soon", 0, false},
		{"Mon, 32 Jan 2026 00:00:00 GMT", 0, false},
	} {
		got, ok := parseRetryAfter(tc.in, clientNow)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseStructured(t *testing.T) {
	for _, tc := range []struct {
		name             string
		limits, policies []string
		want             []policyReport
	}{
		{
			name:     "one policy",
			limits:   []string{`"default";r=42;t=17`},
			policies: []string{`"default";q=100;w=60`},
			want:     []policyReport{{name: "default", remaining: 42, reset: 17 * time.Second, hasReset: true, quota: 100, window: time.Minute}},
		},
		{
			name:     "several policies on several lines, token names",
			limits:   []string{`burst;r=9;t=1`, `"daily";r=3;t=3600`},
			policies: []string{`burst;q=10;w=1, "daily";q=5000;w=86400`},
			want: []policyReport{
				{name: "burst", remaining: 9, reset: time.Second, hasReset: true, quota: 10, window: time.Second},
				{name: "daily", remaining: 3, reset: time.Hour, hasReset: true, quota: 5000, window: 24 * time.Hour},
			},
		},
		{
			name:   "no policy field, no t",
			limits: []string{`"a";r=0`},
			want:   []policyReport{{name: "a", remaining: 0, quota: -1}},
		},
		{
			name:     "unknown parameters are comments; a malformed policy field loses only q and w",
			limits:   []string{`"a";r=5;t=2;acme-x="y"`},
			policies: []string{`"a";q=10;w=`},
			want:     []policyReport{{name: "a", remaining: 5, reset: 2 * time.Second, hasReset: true, quota: -1}},
		},
		{
			name:   "partition keys keep partitions apart",
			limits: []string{`"u";r=1;t=5;pk=:AQI=:, "u";r=7;t=5;pk=:AwQ=:`},
			want: []policyReport{
				{name: "u\x00\x01\x02", remaining: 1, reset: 5 * time.Second, hasReset: true, quota: -1},
				{name: "u\x00\x03\x04", remaining: 7, reset: 5 * time.Second, hasReset: true, quota: -1},
			},
		},
		{
			name:   "members without a valid r, or with a bad t, are skipped",
			limits: []string{`"a";t=5, "b";r=-1;t=5, "c";r="x", "d";r=1.5, "e";r=2;t=-3, "f";r=3;t=1.5, ("g";r=1), 7;r=1, "h";r=4;t=9`},
			want:   []policyReport{{name: "h", remaining: 4, reset: 9 * time.Second, hasReset: true, quota: -1}},
		},
		{name: "unparsable list", limits: []string{`"a";r=5;t=5,`}},
		{name: "not a list", limits: []string{`"a";r=5;t=5 "b";r=1`}},
		{name: "policy only", policies: []string{`"a";q=5;w=5`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseStructured(nil, tc.limits, tc.policies)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseLegacy(t *testing.T) {
	unix := clientNow.Unix()
	for _, tc := range []struct {
		name string
		h    map[string]string
		want policyReport
		ok   bool
	}{
		{"delta reset", map[string]string{"Limit": "100", "Remaining": "42", "Reset": "17"},
			policyReport{remaining: 42, reset: 17 * time.Second, hasReset: true, quota: 100}, true},
		{"epoch reset in seconds", map[string]string{"Limit": "60", "Remaining": "0", "Reset": strconv.FormatInt(unix+30, 10)},
			policyReport{remaining: 0, reset: 30 * time.Second, hasReset: true, quota: 60}, true},
		{"fractional epoch reset", map[string]string{"Remaining": "1", "Reset": strconv.FormatInt(unix+2, 10) + ".25"},
			policyReport{remaining: 1, reset: 2250 * time.Millisecond, hasReset: true, quota: -1}, true},
		{"epoch reset in milliseconds", map[string]string{"Remaining": "1", "Reset": strconv.FormatInt(clientNow.UnixMilli()+1500, 10)},
			policyReport{remaining: 1, reset: 1500 * time.Millisecond, hasReset: true, quota: -1}, true},
		{"epoch reset in the past", map[string]string{"Remaining": "0", "Reset": strconv.FormatInt(unix-30, 10)},
			policyReport{remaining: 0, reset: 0, hasReset: true, quota: -1}, true},
		{"fractional delta", map[string]string{"Remaining": "0", "Reset": "0.5"},
			policyReport{remaining: 0, reset: 500 * time.Millisecond, hasReset: true, quota: -1}, true},
		{"Envoy's limit with a policy", map[string]string{"Limit": "10, 10;w=1", "Remaining": "3", "Reset": "1"},
			policyReport{remaining: 3, reset: time.Second, hasReset: true, quota: 10}, true},
		{"no reset", map[string]string{"Remaining": "3"}, policyReport{remaining: 3, quota: -1}, true},
		{"no remaining", map[string]string{"Limit": "3", "Reset": "1"}, policyReport{}, false},
		{"negative remaining", map[string]string{"Remaining": "-1", "Reset": "1"}, policyReport{}, false},
		{"bad reset", map[string]string{"Remaining": "1", "Reset": "Tue"}, policyReport{}, false},
		{"negative reset", map[string]string{"Remaining": "1", "Reset": "-5"}, policyReport{}, false},
		{"exponent reset", map[string]string{"Remaining": "1", "Reset": "1e9"}, policyReport{}, false},
	} {
		for _, prefix := range []string{"Ratelimit-", "X-Ratelimit-"} {
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(prefix+k, v)
			}
			got, ok := parseLegacy(h, prefix, clientNow)
			if ok != tc.ok || got != tc.want {
				t.Errorf("%s, %s: got %+v, %v; want %+v, %v", tc.name, prefix, got, ok, tc.want, tc.ok)
			}
		}
	}
}

// TestParseResetAtTheEpochBoundary pins the rule that tells a delta from a
// timestamp: half the current Unix time.
func TestParseResetAtTheEpochBoundary(t *testing.T) {
	half := clientNow.Unix() / 2
	if d, _ := parseReset(strconv.FormatInt(half, 10), clientNow); d != time.Duration(half)*time.Second {
		t.Errorf("%d read as %v; want a delay of %d s", half, d, half)
	}
	if d, _ := parseReset(strconv.FormatInt(half+1, 10), clientNow); d != 0 {
		t.Errorf("%d read as %v; want a timestamp in the past", half+1, d)
	}
}

func TestParseReportsIgnoresCachedResponses(t *testing.T) {
	for _, tc := range []struct {
		age  string
		want int
	}{{"", 3}, {"0", 3}, {"1", 0}, {"3600", 0}, {"junk", 0}} {
		h := http.Header{}
		h.Set("RateLimit", `"a";r=1;t=5`)
		h.Set("RateLimit-Remaining", "1")
		h.Set("X-RateLimit-Remaining", "1")
		if tc.age != "" {
			h.Set("Age", tc.age)
		}
		if got := parseReports(nil, h, clientNow); len(got) != tc.want {
			t.Errorf("Age %q: %d reports; want %d", tc.age, len(got), tc.want)
		}
	}
}

// TestParseReportsOfQuotagateServers reads the fields quotagate's own
// middleware writes, in every header style, and checks them against the
// decision they were rendered from.
func TestParseReportsOfQuotagateServers(t *testing.T) {
	for _, style := range []core.HeaderStyle{core.HeadersIETF, core.HeadersDraft, core.HeadersX, core.HeadersXEpoch} {
		store := memstore.MustNew(memstore.Config{SweepInterval: -1})
		key := func(*core.Request) (string, error) { return "k", nil }
		eng := core.MustNew(core.Config{Store: store, Headers: style, Budgets: []core.Budget{
			{Name: "burst", Algorithm: core.TokenBucket, Quota: 5, Window: 5 * time.Second, Key: key},
			{Name: `"day"`, Quota: 1000, Window: 24 * time.Hour, Key: key},
		}})
		h := nethttp.MustMiddleware(eng, core.Use("burst", `"day"`))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for i := range 7 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			now := time.Now()
			got := parseReports(nil, rec.Header(), now)
			denied := rec.Code == http.StatusTooManyRequests
			if denied != (i >= 5) {
				t.Fatalf("%v: request %d answered %d", style, i, rec.Code)
			}
			switch style {
			case core.HeadersIETF:
				if len(got) != 2 || got[0].name != "burst" || got[1].name != `"day"` {
					t.Fatalf("%v: reports %+v", style, got)
				}
				wantR := int64(max(0, 4-i))
				if got[0].remaining != wantR || got[0].quota != 5 || got[0].window != 5*time.Second || !got[0].hasReset {
					t.Errorf("%v: request %d: burst report %+v; want r=%d q=5 w=5s", style, i, got[0], wantR)
				}
				if got[1].quota != 1000 || got[1].window != 24*time.Hour {
					t.Errorf("%v: day report %+v", style, got[1])
				}
			default:
				if len(got) != 1 || got[0].quota != 5 && !denied {
					t.Fatalf("%v: request %d: reports %+v", style, i, got)
				}
				// One token comes back every second; the bucket is full
				// again 5 s after the last take at most.
				if got[0].reset <= 0 || got[0].reset > 5*time.Second+time.Second {
					t.Errorf("%v: request %d: reset %v", style, i, got[0].reset)
				}
			}
		}
	}
}

// BenchmarkParseReports measures reading the fields of one response: two
// IETF policies, as quotagate's middleware writes them.
func BenchmarkParseReports(b *testing.B) {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"burst";q=10;w=1, "day";q=5000;w=86400`)
	h.Set("RateLimit", `"burst";r=9;t=1, "day";r=4211;t=52000`)
	var dst []policyReport
	b.ReportAllocs()
	for b.Loop() {
		dst = parseReports(dst[:0], h, clientNow)
	}
	if len(dst) != 2 {
		b.Fatal(dst)
	}
}

// TestPacerBoundsScopes: the pacer tracks at most maxScopes scopes,
// dropping idle ones to make room, and leaves requests unpaced when none
// is idle.
func TestPacerBoundsScopes(t *testing.T) {
	p := newPaceTable(DefaultMaxReset)
	now := clientNow
	busy := []policyReport{{name: "api", remaining: 5, reset: time.Minute, hasReset: true, quota: -1}}
	for i := range maxScopes {
		s := p.scope(strconv.Itoa(i), now)
		seq, _, _, _ := s.reserve(now)
		s.done(seq, true, busy, now)
	}
	if s := p.scope("one more", now); s != nil {
		t.Fatal("a scope beyond the bound while every scope is constrained")
	}
	later := now.Add(2 * time.Minute) // every constraint lapsed; quotas unknown
	if s := p.scope("one more", later); s == nil {
		t.Fatal("no scope although every other one is idle")
	}
	if n := len(p.scopes); n != 1 {
		t.Errorf("%d scopes kept; want only the new one", n)
	}
}
