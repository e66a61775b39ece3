package keyfunc

import (
	"errors"
	"strconv"

	"github.com/quotagate/quotagate/core"
)

// Separator and escape character of [Composite] keys.
const (
	CompositeSeparator = '|'
	CompositeEscape    = '\\'
)

// Composite returns a key function whose key combines the keys of parts, in
// order: each part's key with every CompositeEscape and CompositeSeparator
// byte preceded by CompositeEscape, joined by CompositeSeparator. Distinct
// tuples of keys always give distinct composite keys, whatever bytes the
// parts contain: ("a|b", "c") is "a\|b|c", ("a", "b|c") is "a|b\|c".
//
// Use it for per-(tenant, operator) budgets:
//
//	keyfunc.Composite(keyfunc.Tenant(tenantKey), keyfunc.Operator(userKey))
//
// When a part fails, its error is returned unchanged. Composite panics if
// parts is empty or holds nil.
func Composite(parts ...core.KeyFunc) core.KeyFunc {
	if len(parts) == 0 {
		panic("keyfunc: Composite needs at least one part")
	}
	for _, p := range parts {
		if p == nil {
			panic("keyfunc: Composite with a nil part")
		}
	}
	parts = append([]core.KeyFunc(nil), parts...)
	return func(r *core.Request) (string, error) {
		var buf [128]byte
		b := buf[:0]
		for i, p := range parts {
			k, err := p(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b = append(b, CompositeSeparator)
			}
			b = appendEscaped(b, k)
		}
		return string(b), nil
	}
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == CompositeSeparator || c == CompositeEscape {
			b = append(b, CompositeEscape)
		}
		b = append(b, s[i])
	}
	return b
}

// Constant returns a key function that gives every request the key s: one
// budget shared by all requests (a global limit), or a shared bucket for
// requests another key function could not key (see the package
// documentation on missing keys).
func Constant(s string) core.KeyFunc {
	return func(*core.Request) (string, error) { return s, nil }
}

// Global returns Constant("global"): every request spends the same budget.
func Global() core.KeyFunc { return Constant("global") }

// FirstOf returns a key function that keys a request with the first of
// alternatives that has a key for it, e.g. the tenant when the request is
// authenticated, else the client IP:
//
//	keyfunc.FirstOf(keyfunc.Tenant(tenantKey), ipKey)
//
// An alternative is passed over when its error wraps [core.ErrNoKey]; any
// other error is returned at once. When none has a key, the last
// alternative's error is returned.
//
// The key is prefixed with the position of the alternative that produced
// it ("0:acme", "1:192.0.2.1"), so keys of different kinds never collide in
// one budget: a tenant named "192.0.2.1" does not share the budget of that
// address. FirstOf panics if alternatives is empty or holds nil.
func FirstOf(alternatives ...core.KeyFunc) core.KeyFunc {
	if len(alternatives) == 0 {
		panic("keyfunc: FirstOf needs at least one alternative")
	}
	for _, a := range alternatives {
		if a == nil {
			panic("keyfunc: FirstOf with a nil alternative")
		}
	}
	alts := append([]core.KeyFunc(nil), alternatives...)
	return func(r *core.Request) (string, error) {
		var err error
		for i, a := range alts {
			var k string
			k, err = a(r)
			if err == nil {
				var buf [128]byte
				b := strconv.AppendInt(buf[:0], int64(i), 10)
				b = append(b, ':')
				b = append(b, k...)
				return string(b), nil
			}
			if !errors.Is(err, core.ErrNoKey) {
				return "", err
			}
		}
		return "", err
	}
}
