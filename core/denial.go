package core

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Denial is the response an adapter writes for a request that is not
// allowed, in addition to the layer's rate-limit header fields.
type Denial struct {
	// Status is the HTTP status code, e.g. 429.
	Status int
	// Header holds the fields to set, e.g. Retry-After and Content-Type.
	Header http.Header
	// Body is the response body.
	Body []byte
}

// A DenyFunc renders the response for a denied decision. Set one per engine
// ([Config].Deny) or per layer ([Deny]) to replace the default body;
// call [DefaultDeny] from it to start from the default.
type DenyFunc func(r *Request, d *Decision) Denial

// Problem type URIs of draft-ietf-httpapi-ratelimit-headers.
const (
	ProblemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Problem is an RFC 9457 problem details object as DefaultDeny writes it.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	RetryAfter       int64    `json:"retry-after,omitempty"`
}

// noKeyDetail says, for a 400, which key the request lacks or garbled,
// and where to send it when the key function's error knows
// ([KeyHinter]).
func noKeyDetail(d *Decision) string {
	var kind, where string
	var h KeyHinter
	if errors.As(d.Err, &h) {
		kind, where = h.KeyHint()
	}
	var s string
	if errors.Is(d.Err, ErrBadKey) || !errors.Is(d.Err, ErrNoKey) {
		s = fmt.Sprintf("The request's %s for budget %q is ambiguous or malformed (repeated, unparsable or too long)", cmp.Or(kind, "credential or key"), d.DeniedBy)
		if where != "" {
			s += "; send one valid value in " + where
		}
	} else {
		s = fmt.Sprintf("The request carries no %s for budget %q", cmp.Or(kind, "key"), d.DeniedBy)
		if where != "" {
			s += "; send it in " + where
		}
	}
	return s + "."
}

// DefaultDeny renders a denial as RFC 9457 application/problem+json:
//
//   - ReasonRateLimited: 429, Retry-After, Cache-Control: no-store, type
//     quota-exceeded, the budget in violated-policies and the retry-after
//     in seconds.
//   - ReasonCostTooHigh: 429 without Retry-After (waiting cannot help).
//   - ReasonNoKey: 401 with WWW-Authenticate when the key function found
//     no credential (a [MissingCredentialError]); 400 when it found no key
//     of another kind (no tenant), or a key or credential that is
//     ambiguous, malformed or too long (two Authorization lines), naming
//     the key and where to send it when the error is a [KeyHinter].
//   - ReasonBadCost: 400.
//   - ReasonUnavailable: 503 with Retry-After, type
//     temporary-reduced-capacity.
//   - ReasonOverloaded: 503 with Retry-After (the guard's hint, see
//     [GuardState]), type temporary-reduced-capacity, saying the server
//     is overloaded. violated-policies is absent: no quota of the client's
//     was spent.
//
// Bodies never carry keys, store errors or other internals.
func DefaultDeny(_ *Request, d *Decision) Denial {
	p := Problem{Type: "about:blank"}
	h := http.Header{}
	h.Set(HeaderCacheControl, "no-store")
	switch d.Reason {
	case ReasonRateLimited:
		p.Type, p.Status = ProblemQuotaExceeded, http.StatusTooManyRequests
		p.RetryAfter = RetryAfterSeconds(d)
		p.ViolatedPolicies = []string{d.DeniedBy}
		p.Detail = fmt.Sprintf("Budget %q is exhausted; retry after %s.", d.DeniedBy, secondsText(p.RetryAfter))
		if deniedBySlots(d) {
			p.Detail = fmt.Sprintf("Budget %q has no free slot: as many requests as it allows are in flight; retry after %s.", d.DeniedBy, secondsText(p.RetryAfter))
		}
		h.Set(HeaderRetryAfter, strconv.FormatInt(p.RetryAfter, 10))
	case ReasonCostTooHigh:
		p.Type, p.Status = ProblemQuotaExceeded, http.StatusTooManyRequests
		p.ViolatedPolicies = []string{d.DeniedBy}
		p.Detail = fmt.Sprintf("The request costs more than budget %q can ever hold.", d.DeniedBy)
	case ReasonNoKey:
		var mc *MissingCredentialError
		switch {
		case errors.As(d.Err, &mc) && mc.Challenge != "":
			p.Status = http.StatusUnauthorized
			p.Detail = "The request carries no credential."
			if mc.Where != "" {
				p.Detail = "The request carries no credential: send it in " + mc.Where + "."
			}
			h.Set("Www-Authenticate", mc.Challenge)
		default:
			p.Status = http.StatusBadRequest
			p.Detail = noKeyDetail(d)
		}
	case ReasonBadCost:
		p.Status = http.StatusBadRequest
		p.Detail = fmt.Sprintf("The cost of the request in budget %q could not be determined.", d.DeniedBy)
	case ReasonOverloaded:
		p.Type, p.Status = ProblemReducedCapacity, http.StatusServiceUnavailable
		p.RetryAfter = RetryAfterSeconds(d)
		p.Detail = fmt.Sprintf("The server is overloaded; retry after %s.", secondsText(p.RetryAfter))
		h.Set(HeaderRetryAfter, strconv.FormatInt(p.RetryAfter, 10))
	default: // ReasonUnavailable
		p.Type, p.Status = ProblemReducedCapacity, http.StatusServiceUnavailable
		p.RetryAfter = RetryAfterSeconds(d)
		p.Detail = "The rate limiter cannot evaluate the request right now."
		h.Set(HeaderRetryAfter, strconv.FormatInt(p.RetryAfter, 10))
	}
	p.Title = http.StatusText(p.Status)
	h.Set(HeaderContentType, "application/problem+json")
	body, _ := json.Marshal(p) // a Problem always marshals
	return Denial{Status: p.Status, Header: h, Body: body}
}

// deniedBySlots reports whether the budget that denied d is a Concurrency
// budget.
func deniedBySlots(d *Decision) bool {
	for i := range d.Results {
		if r := &d.Results[i]; r.Budget == d.DeniedBy && !r.Allowed {
			return r.Limit.Algorithm == Concurrency
		}
	}
	return false
}

// denial renders d with the layer's DenyFunc. A DenyFunc that returns a
// status outside 400-599 is corrected to the default's status, so a denied
// request is never answered as a success.
func (l *Layer) denial(r *Request, d *Decision) Denial {
	den := l.deny(r, d)
	if den.Status < 400 || den.Status > 599 {
		def := DefaultDeny(r, d)
		den.Status = def.Status
	}
	return den
}

// secondsText spells n seconds: "1 second", "41 seconds".
func secondsText(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return strconv.FormatInt(n, 10) + " seconds"
}
