package pacer

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "1.5", ".5", "3.", "-1", "1e3", "99999999999999999999999",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Mon, 04 May 2026 12:01:30 GMT", "0.0000000001", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseRetryAfter(s, clientNow)
		if d < 0 || d > maxSignal {
			t.Fatalf("parseRetryAfter(%q) = %v, out of [0, %v]", s, d, maxSignal)
		}
		if !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v but not ok", s, d)
		}
		trimmed := strings.TrimSpace(s)
		if n, err := strconv.ParseUint(trimmed, 10, 64); err == nil && n < 1e9 && trimmed[0] != '+' {
			if !ok || d != time.Duration(n)*time.Second {
				t.Fatalf("parseRetryAfter(%q) = %v, %v; want %d s", s, d, ok, n)
			}
		}
		if strings.HasPrefix(trimmed, "-") && ok {
			t.Fatalf("parseRetryAfter(%q) accepted a negative value", s)
		}
	})
}

func FuzzParseRateLimit(f *testing.F) {
	for _, s := range [][2]string{
		{`"default";r=42;t=17`, `"default";q=100;w=60`},
		{`burst;r=9;t=1, "daily";r=3;t=3600`, `burst;q=10;w=1, "daily";q=5000;w=86400`},
		{`"u";r=1;t=5;pk=:AQI=:`, `"u";q=10;qu="content-bytes";w=3600;pk=:AQI=:`},
		{`"a";r=0`, ``},
		{`"a";r=5;t=5,`, `"a";q=5;w=`},
		{`("a";r=1), 7;r=1, "b";r=-1`, `"a";q=-5;w=0`},
		{`"a";r=999999999999999;t=999999999999999`, `"a";q=999999999999999;w=999999999999999`},
		{`"a";r=1;t=1.5;r=2`, `*x;q=1`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, limits, policies string) {
		var lp []string
		if policies != "" {
			lp = []string{policies}
		}
		reps := parseStructured(nil, []string{limits}, lp)
		if len(reps) > maxReports {
			t.Fatalf("%d reports; at most %d", len(reps), maxReports)
		}
		for _, r := range reps {
			if r.remaining < 0 || r.reset < 0 || r.reset > maxSignal || r.quota < -1 || r.window < 0 || r.window > maxSignal {
				t.Fatalf("report out of range: %+v", r)
			}
			if !r.hasReset && r.reset != 0 {
				t.Fatalf("reset without hasReset: %+v", r)
			}
		}
		// Round trip: what was read, written back with an independent
		// serializer, reads back the same.
		var list httpsfv.List
		var want []policyReport
		for _, r := range reps {
			if strings.Contains(r.name, "\x00") || r.reset%time.Second != 0 {
				continue
			}
			it := httpsfv.NewItem(r.name)
			it.Params.Add("r", r.remaining)
			if r.hasReset {
				it.Params.Add("t", int64(r.reset/time.Second))
			}
			if _, err := httpsfv.Marshal(httpsfv.List{it}); err != nil {
				continue // a token name that is not a valid string
			}
			list = append(list, it)
			r.quota, r.window = -1, 0
			want = append(want, r)
		}
		if len(list) == 0 {
			return
		}
		s, err := httpsfv.Marshal(list)
		if err != nil {
			t.Fatalf("marshal %+v: %v", list, err)
		}
		got := parseStructured(nil, []string{s}, nil)
		if len(got) != len(want) {
			t.Fatalf("round trip of %q: %+v; want %+v", s, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round trip of %q: %+v; want %+v", s, got[i], want[i])
			}
		}
	})
}

func FuzzParseReset(f *testing.F) {
	for _, s := range []string{"0", "17", "0.5", "1777896000", "1777896000.25", "1777896000123", "-5", "1e9",
		"888948000", "888948001", "NaN", "Inf", "0x10", "1_000", "99999999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseReset(s, clientNow)
		if d < 0 || d > maxSignal || (!ok && d != 0) {
			t.Fatalf("parseReset(%q) = %v, %v", s, d, ok)
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n <= uint64(clientNow.Unix()/2) {
			if !ok || d != min(time.Duration(n)*time.Second, maxSignal) {
				t.Fatalf("parseReset(%q) = %v, %v; want a delay of %d s", s, d, ok, n)
			}
		}
		h := http.Header{}
		h.Set("X-Ratelimit-Remaining", "1")
		h.Set("X-Ratelimit-Reset", s)
		r, ok2 := parseLegacy(h, "X-Ratelimit-", clientNow)
		if strings.TrimSpace(s) == "" {
			// No reset: the fields still report the remaining quota.
			if !ok2 || r.hasReset {
				t.Fatalf("parseLegacy with reset %q = %+v, %v", s, r, ok2)
			}
			return
		}
		if ok2 != ok || (ok && r.reset != d) {
			t.Fatalf("parseLegacy with reset %q = %+v, %v; parseReset = %v, %v", s, r, ok2, d, ok)
		}
	})
}
