package pacer

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// This file parses the rate-limit signals a server sends, for [Transport]:
// Retry-After, the IETF RateLimit and RateLimit-Policy structured fields,
// and the older RateLimit-* and X-RateLimit-* fields. Every parser is
// lenient about form and strict about meaning: a value it cannot read with
// certainty is ignored, never guessed.

// maxSignal bounds every duration read from a header. Anything longer is
// far beyond any sensible MaxReset, to which the transport cuts what it
// reads; this bound only keeps the arithmetic from overflowing.
const maxSignal = 100 * 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After value: delay-seconds ("120"), with a
// decimal fraction tolerated ("1.5", as some servers send), or an HTTP-date
// in any of the three forms RFC 9110 requires recipients to accept
// (IMF-fixdate, RFC 850, asctime). A date in the past means no wait. It
// reports false for anything else, including negative numbers.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if c := v[0]; c >= '0' && c <= '9' || c == '.' {
		return parseSeconds(v)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampSignal(t.Sub(now)), true
}

// parseSeconds reads a non-negative decimal number of seconds: digits with
// an optional fraction ("7", "0.25", ".5", "3."). No sign, exponent or
// spaces. Fractions finer than a nanosecond round up.
func parseSeconds(v string) (time.Duration, bool) {
	i, digits := 0, 0
	var whole int64
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		digits++
		if whole < int64(maxSignal/time.Second) {
			whole = whole*10 + int64(v[i]-'0')
		}
	}
	var frac time.Duration
	if i < len(v) && v[i] == '.' {
		i++
		scale, rest := time.Duration(100_000_000), false
		for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
			digits++
			if scale > 0 {
				frac += time.Duration(v[i]-'0') * scale
				scale /= 10
			} else if v[i] != '0' {
				rest = true
			}
		}
		if rest {
			frac++ // round a sub-nanosecond rest up
		}
	}
	if digits == 0 || i != len(v) {
		return 0, false
	}
	if whole >= int64(maxSignal/time.Second) {
		return maxSignal, true
	}
	return clampSignal(time.Duration(whole)*time.Second + frac), true
}

func clampSignal(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return min(d, maxSignal)
}

// policyReport is what one response says about one rate-limit policy.
type policyReport struct {
	// name identifies the policy within its pacing scope: the policy name
	// of the IETF fields (with the partition key, when one is given), or
	// a fixed name for each legacy header family.
	name string
	// remaining is r: how many quota units the policy has left.
	remaining int64
	// reset is t: the time until more quota becomes available. Valid when
	// hasReset.
	reset    time.Duration
	hasReset bool
	// quota is q, or -1 when unknown.
	quota int64
	// window is w, or 0 when unknown.
	window time.Duration
}

// Pseudo policy names of the legacy header families. They contain a NUL
// byte, which no structured-field name can, so they never collide with a
// server's policy names.
const (
	legacyDraftPolicy = "\x00RateLimit-*"
	legacyXPolicy     = "\x00X-RateLimit-*"
	retryAfterPolicy  = "\x00Retry-After"
)

// cachedResponse reports whether resp was served from a cache (a positive
// Age), in which case its rate-limit fields describe the past and are
// ignored.
func cachedResponse(h http.Header) bool {
	age := strings.TrimSpace(h.Get("Age"))
	if age == "" {
		return false
	}
	n, err := strconv.ParseUint(age, 10, 64)
	return err != nil || n > 0 // an unreadable Age is treated as cached
}

// parseReports returns every policy report in h: the IETF RateLimit field
// joined with RateLimit-Policy, then RateLimit-* and X-RateLimit-*. A
// malformed field is ignored as a whole; so is a response served from a
// cache. It appends to dst.
func parseReports(dst []policyReport, h http.Header, now time.Time) []policyReport {
	if cachedResponse(h) {
		return dst
	}
	dst = parseStructured(dst, h.Values("Ratelimit"), h.Values("Ratelimit-Policy"))
	if r, ok := parseLegacy(h, "Ratelimit-", now); ok {
		r.name = legacyDraftPolicy
		dst = append(dst, r)
	}
	if r, ok := parseLegacy(h, "X-Ratelimit-", now); ok {
		r.name = legacyXPolicy
		dst = append(dst, r)
	}
	return dst
}

// maxReports bounds how many policies one response may report.
const maxReports = 16

// parseStructured parses the RateLimit field lines (a list of policy names
// with r and optionally t) and the RateLimit-Policy lines (names with q and
// optionally w), per draft-ietf-httpapi-ratelimit-headers. Names may be
// Strings (as the draft requires) or Tokens (as earlier servers send).
// A member without a valid r, or a RateLimit field that does not parse, is
// ignored; an unparsable RateLimit-Policy only loses q and w.
func parseStructured(dst []policyReport, limits, policies []string) []policyReport {
	if len(limits) == 0 {
		return dst
	}
	list, err := httpsfv.UnmarshalList(limits)
	if err != nil {
		return dst
	}
	known := parsePolicies(policies)
	n := 0
	for _, m := range list {
		if n == maxReports {
			break
		}
		if rep, ok := structuredReport(m, known); ok {
			dst = append(dst, rep)
			n++
		}
	}
	return dst
}

// policyTerms are what a RateLimit-Policy member says of its policy: the
// quota q, and the window w (0 when not given).
type policyTerms struct {
	q int64
	w time.Duration
}

// parsePolicies reads the RateLimit-Policy lines into the terms of each
// named policy, the first member of a name winning. Members without a
// valid q are ignored, and lines that do not parse give nil.
func parsePolicies(policies []string) map[string]policyTerms {
	if len(policies) == 0 {
		return nil
	}
	pl, err := httpsfv.UnmarshalList(policies)
	if err != nil {
		return nil
	}
	var known map[string]policyTerms
	for _, m := range pl {
		name, params, ok := sfNamed(m)
		if !ok {
			continue
		}
		q, ok := sfInt(params, "q")
		if !ok {
			continue
		}
		v := policyTerms{q: q}
		if w, ok := sfInt(params, "w"); ok && w > 0 {
			v.w = time.Duration(min(w, int64(maxSignal/time.Second))) * time.Second
		}
		if known == nil {
			known = make(map[string]policyTerms, len(pl))
		}
		if _, dup := known[name]; !dup {
			known[name] = v
		}
	}
	return known
}

// structuredReport reads one RateLimit member (a policy name with r,
// optionally t and pk) into a report, with q and w from the policy's
// known terms. It reports false for a member without a valid r or with an
// invalid t.
func structuredReport(m httpsfv.Member, known map[string]policyTerms) (policyReport, bool) {
	name, params, ok := sfNamed(m)
	if !ok {
		return policyReport{}, false
	}
	r, ok := sfInt(params, "r")
	if !ok {
		return policyReport{}, false
	}
	rep := policyReport{name: name, remaining: r, quota: -1}
	if v, present := params.Get("t"); present {
		t, ok := v.(int64)
		if !ok || t < 0 {
			return policyReport{}, false
		}
		rep.reset = time.Duration(min(t, int64(maxSignal/time.Second))) * time.Second
		rep.hasReset = true
	}
	if p, ok := known[name]; ok {
		rep.quota, rep.window = p.q, p.w
	}
	if v, ok := params.Get("pk"); ok {
		if pk, ok := v.([]byte); ok {
			rep.name = name + "\x00" + string(pk)
		}
	}
	return rep, true
}

// sfNamed returns the name and parameters of a list member that is an Item
// whose value is a String or a Token.
func sfNamed(m httpsfv.Member) (string, *httpsfv.Params, bool) {
	it, ok := m.(httpsfv.Item)
	if !ok || it.Params == nil {
		return "", nil, false
	}
	switch v := it.Value.(type) {
	case string:
		return v, it.Params, true
	case httpsfv.Token:
		return string(v), it.Params, true
	}
	return "", nil, false
}

// sfInt returns the non-negative Integer parameter k.
func sfInt(p *httpsfv.Params, k string) (int64, bool) {
	v, ok := p.Get(k)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	return n, ok && n >= 0
}

// parseLegacy reads <prefix>Limit, <prefix>Remaining and <prefix>Reset.
// Remaining is required (a non-negative integer); Limit is optional (its
// leading integer is used, so "10, 10;w=1" reads as 10); Reset is read by
// [parseReset].
func parseLegacy(h http.Header, prefix string, now time.Time) (policyReport, bool) {
	rem := strings.TrimSpace(h.Get(prefix + "Remaining"))
	if rem == "" {
		return policyReport{}, false
	}
	r, err := strconv.ParseInt(rem, 10, 64)
	if err != nil || r < 0 {
		return policyReport{}, false
	}
	rep := policyReport{remaining: r, quota: -1}
	if lim := strings.TrimSpace(h.Get(prefix + "Limit")); lim != "" {
		end := 0
		for end < len(lim) && lim[end] >= '0' && lim[end] <= '9' {
			end++
		}
		if q, err := strconv.ParseInt(lim[:end], 10, 64); err == nil {
			rep.quota = q
		}
	}
	if rs := strings.TrimSpace(h.Get(prefix + "Reset")); rs != "" {
		d, ok := parseReset(rs, now)
		if !ok {
			return policyReport{}, false
		}
		rep.reset, rep.hasReset = d, true
	}
	return rep, true
}

// parseReset reads a legacy reset value, which servers send either as
// delta seconds (the IETF drafts, Envoy, quotagate's default) or as a Unix
// timestamp (GitHub, X, Discord, quotagate's HeadersXEpoch), sometimes with
// a fraction. The two are told apart by size: a value larger than half the
// current Unix time in seconds (about 28 years in 2026) cannot be a
// sensible delay, so it is a timestamp in seconds; one larger than half the
// current Unix time in milliseconds is a timestamp in milliseconds.
// Everything smaller is delta seconds. A timestamp in the past means no
// wait.
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || strings.ContainsAny(v, "+-eExXpP_") {
		return 0, false
	}
	unix := float64(now.UnixNano()) / 1e9
	switch {
	case f > unix*1000/2:
		return clampSignal(secondsFloat(f/1000 - unix)), true
	case f > unix/2:
		return clampSignal(secondsFloat(f - unix)), true
	}
	return clampSignal(secondsFloat(f)), true
}

// secondsFloat converts seconds to a Duration, rounding up to the
// microsecond and saturating instead of overflowing.
func secondsFloat(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	if s >= float64(maxSignal/time.Second) {
		return maxSignal
	}
	return time.Duration(math.Ceil(s*1e6)) * time.Microsecond
}
