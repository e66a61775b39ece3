package tenantapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/quotagate/quotagate/core/policy"
)

// Identity is who a credential belongs to. Operator and portal subscriber
// credentials both belong to a tenant; exactly one of Operator and
// Subscriber is set.
type Identity struct {
	Tenant     string
	Operator   string
	Subscriber string
}

// Access is what a route requires of a request.
type Access int

const (
	// Public routes need no credential; they are limited per client IP.
	Public Access = iota
	// OperatorOnly routes (/api) need an operator's bearer token.
	OperatorOnly
	// SubscriberOnly routes (/portal) need a portal subscriber's bearer
	// token.
	SubscriberOnly
)

// credentials is the example's token directory. A real service would look
// tokens up in its database.
var credentials = map[string]Identity{
	"op-acme-alice":   {Tenant: "acme", Operator: "alice"},
	"op-acme-bob":     {Tenant: "acme", Operator: "bob"},
	"op-hooli-hank":   {Tenant: "hooli", Operator: "hank"},
	"op-globex-gina":  {Tenant: "globex", Operator: "gina"},
	"op-initech-ivan": {Tenant: "initech", Operator: "ivan"},
	"op-umbrella-una": {Tenant: "umbrella", Operator: "una"},
	"sub-acme-1001":   {Tenant: "acme", Subscriber: "1001"},
	"sub-acme-1002":   {Tenant: "acme", Subscriber: "1002"},
}

// licences are the tenants' licences: the subscriber cap the tier derives
// from, or a tier an operator pinned.
var licences = map[string]policy.Subject{
	"acme":     {Cap: 80},              // small
	"hooli":    {Cap: 900},             // medium
	"globex":   {Cap: 5000},            // large
	"initech":  {Cap: policy.NoCap},    // xl: no cap
	"umbrella": {Cap: 50, Tier: "max"}, // pinned to max
}

// lookupLicence is the policy.LookupFunc of the by-tier budgets: the
// subject of a tenant key.
func lookupLicence(_ context.Context, tenant string) (policy.Subject, error) {
	s, ok := licences[tenant]
	if !ok {
		return policy.Subject{}, fmt.Errorf("no licence for tenant %q", tenant)
	}
	return s, nil
}

// BearerToken returns the token of an Authorization header value of the
// Bearer scheme (the scheme name is case-insensitive, RFC 9110 §11.1), and
// whether the value is one. The token must be a non-empty token68 (RFC 9110
// §11.2), with nothing after it.
func BearerToken(authorization string) (string, bool) {
	scheme, rest, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token := strings.TrimLeft(rest, " ")
	if token == "" || len(token) > 256 {
		return "", false
	}
	end := len(token)
	for end > 0 && token[end-1] == '=' {
		end--
	}
	if end == 0 {
		return "", false
	}
	for i := 0; i < end; i++ {
		c := token[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return "", false
		}
	}
	return token, true
}

// Authenticate returns the identity of a request to a route requiring
// access, given every value of its Authorization header, and whether the
// request may proceed. Public routes always proceed with a zero Identity.
// A missing, repeated, malformed or unknown credential, or one of the wrong
// kind (a subscriber's on /api, an operator's on /portal), does not.
func Authenticate(access Access, authorization []string) (Identity, bool) {
	if access == Public {
		return Identity{}, true
	}
	if len(authorization) != 1 {
		return Identity{}, false
	}
	token, ok := BearerToken(authorization[0])
	if !ok {
		return Identity{}, false
	}
	id, ok := credentials[token]
	switch {
	case !ok:
		return Identity{}, false
	case access == OperatorOnly && id.Operator == "":
		return Identity{}, false
	case access == SubscriberOnly && id.Subscriber == "":
		return Identity{}, false
	}
	return id, true
}

type identityKey struct{}

// WithIdentity returns ctx carrying id. The authentication middleware of
// each main stores the identity this way (in the request's context, or
// Fiber's user context), where the budgets' key functions find it.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity stored in ctx by WithIdentity.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
