package sendapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/policy"
	"github.com/quotagate/quotagate/keyfunc"
)

// Rate-limit groups: each is one quotagate budget and one layer.
const (
	GroupEmailSend  = "email_send"
	GroupSMSSend    = "sms_send"
	GroupManagement = "management"
	GroupAuth       = "auth"
)

// groups lists the groups in the order the README presents them.
var groups = []string{GroupEmailSend, GroupSMSSend, GroupManagement, GroupAuth}

// Window is the length of every group's fixed window, aligned to the
// minute.
const Window = time.Minute

// Base quotas of the groups, before plan increases and overrides.
const (
	BaseEmailSend  = 100
	BaseSMSSend    = 60
	BaseManagement = 300
	// AuthQuota is the auth group's fixed threshold per client IP; plans
	// and overrides do not apply to unauthenticated requests.
	AuthQuota = 10
)

// planIncreases is what each plan adds to each group's base quota. A group
// a plan does not name gets no increase.
var planIncreases = map[string]map[string]int64{
	PlanStarter: {GroupEmailSend: 0, GroupSMSSend: 0},
	PlanScale:   {GroupEmailSend: 900, GroupSMSSend: 900},
}

// unparsableClient keys, in the auth group, the requests whose client
// address cannot be determined (a malformed X-Forwarded-For from a trusted
// proxy): they share one budget rather than go unlimited or be refused.
const unparsableClient = "unparsable-client"

// budgets returns the example's budgets: the send groups keyed by
// organisation, management by acting credential (the hashed access key),
// both resolved as base + plan increase or an override; auth by client IP,
// flat.
func budgets(h *keyfunc.Hasher, proxies []string, subjects *policy.Subjects) ([]core.Budget, error) {
	plans, err := policy.NewPlans(planIncreases)
	if err != nil {
		return nil, err
	}
	res := &policy.Resolver{Plans: plans, Subjects: subjects}

	// The authentication middleware stored the credential in the request
	// context; the send groups count per organisation.
	org := keyfunc.Func("organisation", func(r *core.Request) (string, bool) {
		if c := credentialOf(r); c != nil {
			return c.Org.ID, true
		}
		return "", false
	})
	// Management counts per acting credential: the access key, hashed with
	// the secret the directory uses, so the raw key is never a store key.
	cred, err := keyfunc.APIKey(keyfunc.APIKeyConfig{Hasher: h, Scheme: "AccessKey"})
	if err != nil {
		return nil, err
	}
	ipCfg := keyfunc.IPConfig{}
	if len(proxies) > 0 {
		ipCfg.TrustedProxies = proxies
		ipCfg.Headers = []keyfunc.Source{keyfunc.XForwardedFor}
	}
	ip, err := keyfunc.IP(ipCfg)
	if err != nil {
		return nil, err
	}
	return []core.Budget{
		{
			Name: GroupEmailSend, Quota: BaseEmailSend, Window: Window,
			Key: org, KeyClass: "organisation",
			QuotaFunc: res.QuotaFunc(GroupEmailSend, policy.ByPlan, BaseEmailSend, nil),
		},
		{
			Name: GroupSMSSend, Quota: BaseSMSSend, Window: Window,
			Key: org, KeyClass: "organisation",
			QuotaFunc: res.QuotaFunc(GroupSMSSend, policy.ByPlan, BaseSMSSend, nil),
		},
		{
			// Keyed by credential, resolved by the credential's
			// organisation: no plan increase, but an override of the
			// organisation applies.
			Name: GroupManagement, Quota: BaseManagement, Window: Window,
			Key: cred, KeyClass: "credential",
			QuotaFunc: res.QuotaFunc(GroupManagement, policy.ByPlan, BaseManagement, org),
		},
		{
			Name: GroupAuth, Quota: AuthQuota, Window: Window,
			Key: ip, KeyClass: "ip",
			MissingKey: core.MissingKeyFallback, FallbackKey: keyfunc.Constant(unparsableClient),
		},
	}, nil
}

// Error is the body of every error response: {"error":{...}}.
type Error struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Name    string `json:"name"`
	Message string `json:"message"`
}

// Error codes. E01003 (RateLimited) is the contract's; the others are this
// example's own.
const (
	CodeUnauthorized        = "E01001"
	CodeInvalidRequest      = "E01002"
	CodeRateLimited         = "E01003"
	CodeNotFound            = "E01004"
	CodeIdempotencyConflict = "E01005"
	CodeIdempotencyMismatch = "E01006"
	CodeUnavailable         = "E01007"
)

// errorBody renders {"error":{...}}.
func errorBody(e Error) []byte {
	b, _ := marshal(struct {
		Error Error `json:"error"`
	}{e}) // strings always marshal
	return b
}

// marshal is json.Marshal without HTML escaping ("<" stays "<").
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// Deny renders the Send API's denials. A rate-limited request gets 429,
// Retry-After (whole seconds, never before the window resets),
// Cache-Control: no-store and
//
//	{"error":{"type":"rate_limit_error","code":"E01003","name":"RateLimited","message":"…"}}
//
// The layer has already set RateLimit-Policy and RateLimit, with r=0 for
// the exhausted group. Other reasons, which this policy's configuration
// does not produce (a request without a key is stopped by authentication
// first, and every group fails open), keep core.DefaultDeny's status and
// headers with a body of the same shape.
func Deny(r *core.Request, d *core.Decision) core.Denial {
	if d.Reason == core.ReasonRateLimited {
		ra := core.RetryAfterSeconds(d)
		h := http.Header{}
		h.Set(core.HeaderRetryAfter, strconv.FormatInt(ra, 10))
		h.Set(core.HeaderCacheControl, "no-store")
		h.Set(core.HeaderContentType, "application/json")
		return core.Denial{
			Status: http.StatusTooManyRequests,
			Header: h,
			Body: errorBody(Error{
				Type: "rate_limit_error", Code: CodeRateLimited, Name: "RateLimited",
				Message: fmt.Sprintf("Rate limit exceeded for group %q. Retry after %d seconds.", d.DeniedBy, ra),
			}),
		}
	}
	den := core.DefaultDeny(r, d)
	e := Error{Type: "api_error", Code: CodeUnavailable, Name: "Unavailable", Message: "The request cannot be served right now."}
	switch den.Status {
	case http.StatusUnauthorized:
		e = Error{Type: "authentication_error", Code: CodeUnauthorized, Name: "Unauthorized", Message: "A valid AccessKey credential is required."}
	case http.StatusBadRequest, http.StatusTooManyRequests:
		e = Error{Type: "invalid_request_error", Code: CodeInvalidRequest, Name: "InvalidRequest", Message: "The request cannot be rated."}
	}
	den.Header.Set(core.HeaderContentType, "application/json")
	den.Body = errorBody(e)
	return den
}
