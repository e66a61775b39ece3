package core

import (
	"context"
	"errors"
)

// Request is the router-neutral view of an HTTP request that key functions,
// cost functions and quota resolvers read. Adapters fill it from their
// router's request without copying headers or bodies.
//
// A Request is only valid during the call it is passed to; functions that
// keep a string from it beyond that call must copy it if the adapter says its
// strings are borrowed (Fiber's are).
type Request struct {
	// Method is the request method, e.g. "GET".
	Method string
	// Route is the route pattern the router matched, e.g. "/users/:id" or
	// "/users/{id}"; empty when the router does not report one.
	Route string
	// Path is the raw request path, e.g. "/users/42".
	Path string
	// RawQuery is the encoded query string without the '?', e.g. "a=1&b=2".
	RawQuery string
	// RemoteAddr is the transport peer address, "ip:port" or "ip". It is the
	// socket address, never a value taken from a forwarding header.
	RemoteAddr string
	// Header reads request headers by (case-insensitive) name.
	Header HeaderReader
	// Values reads request-scoped values set by earlier middleware: context
	// values, Gin keys, Echo values, Fiber locals. It may be nil.
	Values ValueReader
	// Context is the request's context. It may be nil, meaning
	// context.Background().
	Context context.Context
}

// Value returns the request-scoped value stored under key, or nil.
func (r *Request) Value(key any) any {
	if r.Values != nil {
		if v := r.Values.Value(key); v != nil {
			return v
		}
	}
	if r.Context != nil {
		return r.Context.Value(key)
	}
	return nil
}

func (r *Request) ctx() context.Context {
	if r.Context == nil {
		return context.Background()
	}
	return r.Context
}

// HeaderReader reads request headers. net/http's http.Header implements it.
type HeaderReader interface {
	// Get returns the first value of the named header, or "".
	Get(name string) string
	// Values returns every value of the named header, one per field line,
	// in the order received.
	Values(name string) []string
}

// ValueReader reads request-scoped values. A context.Context implements it.
type ValueReader interface {
	Value(key any) any
}

// A KeyFunc says whose budget a request spends: it returns the partition key
// (a client IP, a hashed API key, a tenant, ...). It must not return a raw
// secret; hash it first (package keyfunc does).
//
// A KeyFunc that finds no key returns an error wrapping [ErrNoKey]; what
// happens then is the budget's [MissingKey] setting. A garbled key (an
// error wrapping [ErrBadKey] as well) is denied or keyed by the fallback,
// never skipped. Any other error (a malformed or ambiguous credential)
// denies the request with ReasonNoKey whatever that setting. So a client
// cannot leave its key's budget by garbling its key. Every error is
// reported to the observer.
type KeyFunc func(r *Request) (string, error)

// ErrNoKey reports that a key function found no key in the request (no
// credential, no tenant on an unauthenticated request, an unparsable client
// address).
var ErrNoKey = errors.New("quotagate: no key for request")

// ErrBadKey reports a key value that the request carries but garbled:
// malformed, longer than the key function accepts, or repeated (two field
// lines where one is expected). Key functions wrap it, often beside
// [ErrNoKey]; a budget never skips such a request, whatever its
// [MissingKey] setting: it is denied (400), or, with MissingKeyFallback,
// counted under the fallback key, so that a client cannot move itself to
// a cheaper path than a valid key's by garbling its key.
var ErrBadKey = errors.New("quotagate: malformed key")

// A KeyHinter is an error of a key function that can say, for the
// client, which key a request lacks or garbled (kind: "tenant") and where
// it belongs (where: "the X-Tenant header"). [DefaultDeny]'s 400 names
// both.
type KeyHinter interface {
	KeyHint() (kind, where string)
}

// MissingCredentialError is the error a key function that reads a
// credential (an API key, a bearer token) returns for a request that
// carries none. It wraps [ErrNoKey], so the budget's [MissingKey] setting
// applies; when the request is denied for it, [DefaultDeny] answers 401
// with WWW-Authenticate: Challenge, as RFC 9110 §15.5.2 requires of a 401.
type MissingCredentialError struct {
	// Challenge is the WWW-Authenticate challenge (RFC 9110 §11.6.1), e.g.
	// `Bearer` or `Bearer realm="api"`.
	Challenge string
	// Msg says which credential is missing.
	Msg string
	// Where says where the request should carry the credential, for the
	// client, e.g. "the X-API-Key header"; DefaultDeny's detail names it
	// (and no budget: the client needs the header, not the policy).
	Where string
}

func (e *MissingCredentialError) Error() string { return e.Msg }

// KeyHint implements [KeyHinter]: a credential, to be sent in Where.
func (e *MissingCredentialError) KeyHint() (kind, where string) { return "credential", e.Where }

// Unwrap returns ErrNoKey.
func (e *MissingCredentialError) Unwrap() error { return ErrNoKey }

// A CostFunc computes what a request costs in a budget. It is called after
// the method filter, once per budget it is configured for. A negative cost or
// an error denies the request with [ReasonBadCost].
type CostFunc func(r *Request) (int64, error)

// A QuotaFunc resolves a budget's quota for one request and its key: a
// quota by tier or by plan, or an override. It is called on every decision,
// so it should be cheap or cached (package policy provides a cache). On error
// the engine uses the budget's static Quota and reports the error to the
// observer.
type QuotaFunc func(r *Request, key string) (int64, error)
