package sendapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/policy"
	"github.com/quotagate/quotagate/keyfunc"
)

// Plans of the example.
const (
	PlanStarter = "starter"
	PlanScale   = "scale"
)

// Organisation is an account: the subject whose plan and overrides decide
// the quotas of its organisation-wide groups.
type Organisation struct {
	// ID names the organisation, e.g. "acme". It keys the send groups.
	ID string
	// Plan is the organisation's plan, PlanStarter or PlanScale.
	Plan string
	// Overrides replaces, per group, the base quota and the plan increase.
	Overrides map[string]int64
}

// Credential is an access key's record: who acts, for which organisation.
// The key itself is not kept; credentials are found by its keyed hash.
type Credential struct {
	// Name is a non-secret name of the credential, e.g. "acme-1".
	Name string
	// Org is the organisation the credential belongs to.
	Org *Organisation
}

// DemoOrganisations returns the example's organisations: acme and initech
// on the starter plan (initech with an email_send override of 50), globex
// on the scale plan.
func DemoOrganisations() map[string]*Organisation {
	return map[string]*Organisation{
		"acme":    {ID: "acme", Plan: PlanStarter},
		"globex":  {ID: "globex", Plan: PlanScale},
		"initech": {ID: "initech", Plan: PlanStarter, Overrides: map[string]int64{GroupEmailSend: 50}},
	}
}

// demoAccessKeys maps the example's access keys to their credential name
// and organisation. A real service stores only the keys' hashes.
var demoAccessKeys = map[string][2]string{
	"ak_acme_1":    {"acme-1", "acme"},
	"ak_acme_2":    {"acme-2", "acme"},
	"ak_globex_1":  {"globex-1", "globex"},
	"ak_initech_1": {"initech-1", "initech"},
}

// Directory finds credentials by access key and organisations by ID.
type Directory struct {
	hasher *keyfunc.Hasher
	byHash map[string]*Credential
	orgs   map[string]*Organisation
}

// NewDirectory returns the directory of the demo credentials, with keys
// hashed by h.
func NewDirectory(h *keyfunc.Hasher) (*Directory, error) {
	d := &Directory{hasher: h, byHash: map[string]*Credential{}, orgs: DemoOrganisations()}
	for _, key := range slices.Sorted(maps.Keys(demoAccessKeys)) {
		v := demoAccessKeys[key]
		org, ok := d.orgs[v[1]]
		if !ok {
			return nil, fmt.Errorf("credential %s: unknown organisation %q", v[0], v[1])
		}
		d.byHash[h.Sum(key)] = &Credential{Name: v[0], Org: org}
	}
	return d, nil
}

// Lookup returns the credential of an access key, or nil.
func (d *Directory) Lookup(accessKey string) *Credential {
	return d.byHash[d.hasher.Sum(accessKey)]
}

// Subject returns what quota resolution needs to know about organisation
// id: its plan and overrides. It is the lookup of a policy.Subjects cache.
func (d *Directory) Subject(_ context.Context, id string) (policy.Subject, error) {
	org, ok := d.orgs[id]
	if !ok {
		return policy.Subject{}, fmt.Errorf("unknown organisation %q", id)
	}
	return policy.Subject{Plan: org.Plan, Overrides: maps.Clone(org.Overrides)}, nil
}

// credentialKey is the request-context key of the authenticated credential.
type credentialKey struct{}

// WithCredential returns a copy of ctx carrying c, for the authentication
// middleware of each router. Key functions read it through
// core.Request.Value, which every adapter backs with the request's context.
func WithCredential(ctx context.Context, c *Credential) context.Context {
	return context.WithValue(ctx, credentialKey{}, c)
}

// CredentialFrom returns the credential ctx carries, or nil.
func CredentialFrom(ctx context.Context) *Credential {
	c, _ := ctx.Value(credentialKey{}).(*Credential)
	return c
}

// credentialOf returns the credential of a request being decided, or nil.
func credentialOf(r *core.Request) *Credential {
	c, _ := r.Value(credentialKey{}).(*Credential)
	return c
}

// Errors of ParseAccessKey. They never contain the credential.
var (
	ErrNoCredential        = errors.New("no AccessKey credential")
	ErrAmbiguousCredential = errors.New("several Authorization field lines")
	ErrMalformedCredential = errors.New("malformed AccessKey credential")
)

// MaxAccessKeyLen is the longest access key accepted, in bytes.
const MaxAccessKeyLen = 256

// ParseAccessKey returns the key of "Authorization: AccessKey <key>" from
// the request's Authorization field lines. The scheme is matched without
// regard to case; the key is a token68 (RFC 9110: letters, digits and
// "-._~+/" followed by any "="), at most MaxAccessKeyLen bytes. Several
// Authorization lines are refused, whatever their schemes, as the
// management group's key function refuses them.
func ParseAccessKey(lines []string) (string, error) {
	switch len(lines) {
	case 0:
		return "", ErrNoCredential
	case 1:
	default:
		return "", ErrAmbiguousCredential
	}
	v := trimOWS(lines[0])
	const scheme = "AccessKey"
	if len(v) < len(scheme) || !equalFold(v[:len(scheme)], scheme) {
		return "", ErrNoCredential
	}
	rest := v[len(scheme):]
	if rest == "" {
		return "", ErrMalformedCredential
	}
	if rest[0] != ' ' && rest[0] != '\t' {
		return "", ErrNoCredential // another scheme, e.g. "AccessKeys"
	}
	key := trimOWS(rest)
	if key == "" || len(key) > MaxAccessKeyLen || !isToken68(key) {
		return "", ErrMalformedCredential
	}
	return key, nil
}

// isToken68 reports whether s is an RFC 9110 token68.
func isToken68(s string) bool {
	i := 0
	for i < len(s) && isToken68Char(s[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	for i < len(s) && s[i] == '=' {
		i++
	}
	return i == len(s)
}

func isToken68Char(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '+', '/':
		return true
	}
	return false
}

func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
