package core

import (
	"strconv"
	"time"
	"unsafe"
)

// HeaderStyle selects the rate-limit header fields written on responses.
// Every style covers the budgets evaluated for the request except shadow
// budgets. A budget whose store failed open is listed in RateLimit-Policy
// (its quota is known) but not in RateLimit or the legacy fields (its
// state is not). A denial's Retry-After is [RetryAfterSeconds].
type HeaderStyle int

const (
	// HeadersIETF writes the structured fields of
	// draft-ietf-httpapi-ratelimit-headers, one list member per evaluated
	// budget:
	//
	//	RateLimit-Policy: "t_mutate";q=300;w=60
	//	RateLimit: "t_mutate";r=212;t=41
	//
	// q is the quota, w the window in seconds (rounded up), r the units
	// remaining, and t the seconds (rounded up, at least 1 when r is 0)
	// until the budget is full again, or, for the budget that denied a
	// request, until that request would pass. For a token bucket with a
	// burst larger than its quota, r can exceed q.
	//
	// A Concurrency budget is the draft's concurrency limit: its policy
	// member is "exports";q=4;qu="concurrent-requests" (no w), and its
	// RateLimit member "exports";r=1 gives the free slots, with no t, since
	// no time is known at which a slot frees. The styles below report its
	// reset as 0 (1 when no slot is free).
	HeadersIETF HeaderStyle = iota
	// HeadersDraft writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (delta seconds) for the budget closest to exhaustion
	// (the denying budget on a denial), as drafts -00 to -06 did.
	HeadersDraft
	// HeadersX writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (delta seconds) for the budget closest to
	// exhaustion.
	HeadersX
	// HeadersXEpoch is HeadersX with X-RateLimit-Reset as a Unix timestamp
	// in seconds, as GitHub sends it.
	HeadersXEpoch
	// HeadersNone writes no rate-limit fields (a denial still carries the
	// Retry-After its DenyFunc sets).
	HeadersNone
)

var headerStyleNames = [...]string{"ietf", "draft", "x", "x_epoch", "none"}

// String returns the style's configuration name: "ietf", "draft", "x",
// "x_epoch" or "none".
func (s HeaderStyle) String() string {
	return enumString(s, headerStyleNames[:], "HeaderStyle")
}

// Header field names, in Go's canonical form.
const (
	HeaderPolicy       = "Ratelimit-Policy"
	HeaderRateLimit    = "Ratelimit"
	HeaderLimit        = "Ratelimit-Limit"
	HeaderRemaining    = "Ratelimit-Remaining"
	HeaderReset        = "Ratelimit-Reset"
	HeaderXLimit       = "X-Ratelimit-Limit"
	HeaderXRemaining   = "X-Ratelimit-Remaining"
	HeaderXReset       = "X-Ratelimit-Reset"
	HeaderRetryAfter   = "Retry-After"
	HeaderCacheControl = "Cache-Control"
	HeaderContentType  = "Content-Type"
)

// writeFields writes the header fields of every budget evaluated so far,
// and removes those an outer layer wrote that this layer does not (another
// header style), so stacked layers never leave stale or mismatched fields.
func (l *Layer) writeFields(st *RequestState, x Exchange) {
	sp := &st.fields // in the RequestState, which is on the heap anyway
	prev, nprev := sp.Names, sp.N
	if nprev == 0 && l.headers == HeadersNone {
		return // nothing to write, nothing to remove
	}
	buf := l.appendFields(x.FieldBuffer(), &st.Decision, sp)
	for _, name := range prev[:nprev] {
		if !sp.Has(name) {
			x.DelHeader(name)
		}
	}
	for i := 0; i < sp.N; i++ {
		v := sp.Static[i]
		if v == "" && sp.End[i] > sp.Start[i] {
			v = unsafe.String(&buf[sp.Start[i]], sp.End[i]-sp.Start[i])
		}
		x.SetHeader(sp.Names[i], v)
	}
}

// appendFields renders the values of d's rate-limit header fields in the
// layer's style into dst and records in sp where each one is. Call it with
// the Decision after the innermost layer decided: the fields cover every
// budget evaluated for the request except shadow budgets. A budget whose
// store failed open is listed in RateLimit-Policy (its quota is known) but
// not in RateLimit or the legacy fields (its state is not). A value that is
// the same for every request (a RateLimit-Policy of one budget at its
// configured quota) is recorded in sp.Static instead of copied.
func (l *Layer) appendFields(dst []byte, d *Decision, sp *fieldSpans) []byte {
	*sp = fieldSpans{}
	return render(dst, l.headers, d, l.e.clock, sp)
}

// fieldSpans locates the header fields a layer rendered into a buffer:
// field i is called Names[i], and its value is Static[i] when that is not
// empty (a value that is the same for every request, not copied), else
// buf[Start[i]:End[i]].
type fieldSpans struct {
	N          int
	Names      [3]string
	Start, End [3]int
	Static     [3]string
}

// Has reports whether one of the fields is called name.
func (s *fieldSpans) Has(name string) bool {
	for i := 0; i < s.N; i++ {
		if s.Names[i] == name {
			return true
		}
	}
	return false
}

// reported says whether r's state is known: not a shadow budget, and
// evaluated by a store (the main one or the fallback).
func reported(r *Result) bool {
	return !r.Shadow && !r.FailedOpen && (!r.Unavailable || r.Local)
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// resetSeconds is the t value of r: the retry-after of a budget that denied,
// its reset otherwise; at least 1 when nothing remains.
func resetSeconds(r *Result) int64 {
	var t int64
	if !r.Allowed && !r.Refunded && r.RetryAfter > 0 {
		t = seconds(r.RetryAfter)
	} else {
		t = seconds(r.Reset)
	}
	if r.Remaining <= 0 && t < 1 {
		t = 1
	}
	return clampSF(t)
}

func clampSF(v int64) int64 {
	if v > MaxQuota {
		return MaxQuota
	}
	if v < 0 {
		return 0
	}
	return v
}

// render appends the values of d's fields in style to buf and records
// them in sp. A value that needs no formatting (one pre-rendered policy
// member) is recorded in sp.Static instead of copied.
func render(buf []byte, style HeaderStyle, d *Decision, c Clock, sp *fieldSpans) []byte {
	base := len(buf)
	switch style {
	case HeadersIETF:
		// The policy lists every budget evaluated (a failed-open budget's
		// quota is still known); RateLimit only those whose state is.
		members := 0
		var policy string // the value when it is one pre-rendered member
		for i := range d.Results {
			r := &d.Results[i]
			if r.Shadow {
				continue
			}
			if members++; members > 1 {
				buf = append(buf, ", "...)
			}
			if r.rule != nil && r.Limit == r.rule.static {
				policy = r.rule.policy
				buf = append(buf, policy...)
			} else {
				policy = ""
				buf = appendPolicyMember(buf, r, r.Limit)
			}
		}
		if members == 0 {
			return buf
		}
		sp.N, sp.Names[0] = 1, HeaderPolicy
		if members == 1 && policy != "" {
			buf = buf[:base] // used as is: no copy
			sp.Static[0] = policy
		}
		sp.Start[0], sp.End[0] = base, len(buf)
		from := len(buf)
		first := true
		for i := range d.Results {
			r := &d.Results[i]
			if !reported(r) {
				continue
			}
			if !first {
				buf = append(buf, ", "...)
			}
			first = false
			buf = appendSFName(buf, r)
			buf = append(buf, ";r="...)
			buf = strconv.AppendInt(buf, clampSF(r.Remaining), 10)
			if r.Limit.Algorithm != Concurrency { // no time is known when a slot frees
				buf = append(buf, ";t="...)
				buf = strconv.AppendInt(buf, resetSeconds(r), 10)
			}
		}
		if !first {
			sp.N, sp.Names[1] = 2, HeaderRateLimit
			sp.Start[1], sp.End[1] = from, len(buf)
		}
	case HeadersDraft, HeadersX, HeadersXEpoch:
		r := tightest(d)
		if r == nil {
			return buf
		}
		sp.N = 3
		if style == HeadersDraft {
			sp.Names = [3]string{HeaderLimit, HeaderRemaining, HeaderReset}
		} else {
			sp.Names = [3]string{HeaderXLimit, HeaderXRemaining, HeaderXReset}
		}
		t := resetSeconds(r)
		if style == HeadersXEpoch {
			t += c.Now().Unix()
		}
		for i, v := range [3]int64{clampSF(r.Limit.Quota), clampSF(r.Remaining), t} {
			sp.Start[i] = len(buf)
			buf = strconv.AppendInt(buf, v, 10)
			sp.End[i] = len(buf)
		}
	}
	return buf
}

// appendPolicyMember appends r's RateLimit-Policy list member under l. A
// Concurrency budget's member is the draft's concurrency limit:
// q=<slots>;qu="concurrent-requests", with no window (its Window is a
// lease, not a period of the quota).
func appendPolicyMember(buf []byte, r *Result, l Limit) []byte {
	buf = appendSFName(buf, r)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, clampSF(l.Quota), 10)
	if l.Algorithm == Concurrency {
		return append(buf, `;qu="concurrent-requests"`...)
	}
	buf = append(buf, ";w="...)
	return strconv.AppendInt(buf, clampSF(seconds(l.Window)), 10)
}

// appendSFName appends r's budget name as an sf-string.
func appendSFName(buf []byte, r *Result) []byte {
	if r.rule != nil {
		return append(buf, r.rule.sfName...)
	}
	return appendSFString(buf, r.Budget)
}

// tightest returns the result closest to exhaustion: the denying budget of
// a denied decision, else the lowest remaining/quota.
func tightest(d *Decision) *Result {
	var best *Result
	var bestRatio float64
	for i := range d.Results {
		r := &d.Results[i]
		if !reported(r) {
			continue
		}
		if !d.Allowed && r.Budget == d.DeniedBy && !r.Refunded {
			return r
		}
		ratio := float64(r.Remaining) / float64(r.Limit.Quota)
		if best == nil || ratio < bestRatio {
			best, bestRatio = r, ratio
		}
	}
	return best
}

// appendSFString appends s as an RFC 9651 sf-string. Budget names are
// validated to be printable ASCII, so only '"' and '\' need escaping.
func appendSFString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			buf = append(buf, '\\')
		}
		buf = append(buf, s[i])
	}
	return append(buf, '"')
}

// RetryAfterSeconds is the Retry-After value for a denied decision: its
// RetryAfter in whole seconds, rounded up, at least 1. It is never earlier
// than the t of the budget that denied.
func RetryAfterSeconds(d *Decision) int64 {
	return clampSF(max(1, seconds(d.RetryAfter)))
}
