package keyfunc

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/quotagate/quotagate/core"
)

// MaxValueLen is the longest identity, in bytes, that Value, Func and their
// Tenant, Operator and Subscriber forms accept; a longer one is refused with
// an error wrapping [ErrMalformed], so that no request can mint arbitrarily
// large store keys.
const MaxValueLen = 256

// ErrUnsupportedValue reports a request-scoped value whose type a key
// function cannot turn into a key. It is a programming error in the
// application; the error wraps it and [core.ErrNoKey].
var ErrUnsupportedValue = errors.New("keyfunc: unsupported value type")

// Value returns a key function that keys requests by the request-scoped
// value stored under key (r.Value(key): a context value, a Gin key, an Echo
// value or a Fiber local, as the adapter exposes them), set by the
// application's authentication middleware. kind names the identity in
// errors ("tenant"). The value may be a string, a []byte, an integer or a
// fmt.Stringer; nil or "" means there is none and the error wraps
// [core.ErrNoKey]. Value panics if key is nil.
func Value(kind string, key any) core.KeyFunc {
	if key == nil {
		panic("keyfunc: Value with a nil key")
	}
	errs := newValueErrors(kind, "")
	return func(r *core.Request) (string, error) {
		return errs.check(toKey(r.Value(key)))
	}
}

// Func returns a key function that keys requests by what fn returns: the
// identity and whether there is one. kind names the identity in errors.
// Func panics if fn is nil.
func Func(kind string, fn func(r *core.Request) (string, bool)) core.KeyFunc {
	if fn == nil {
		panic("keyfunc: Func with a nil function")
	}
	errs := newValueErrors(kind, "")
	return func(r *core.Request) (string, error) {
		s, ok := fn(r)
		if !ok {
			s = ""
		}
		return errs.check(s, true)
	}
}

// Tenant keys requests by the tenant stored under key: Value("tenant", key).
func Tenant(key any) core.KeyFunc { return Value("tenant", key) }

// TenantFunc keys requests by the tenant fn returns: Func("tenant", fn).
func TenantFunc(fn func(r *core.Request) (string, bool)) core.KeyFunc {
	return Func("tenant", fn)
}

// Operator keys requests by the operator (the user acting within a tenant)
// stored under key: Value("operator", key). Combine it with Tenant in
// [Composite] for per-(tenant, operator) budgets.
func Operator(key any) core.KeyFunc { return Value("operator", key) }

// OperatorFunc keys requests by the operator fn returns.
func OperatorFunc(fn func(r *core.Request) (string, bool)) core.KeyFunc {
	return Func("operator", fn)
}

// Subscriber keys requests by the subscriber stored under key:
// Value("subscriber", key).
func Subscriber(key any) core.KeyFunc { return Value("subscriber", key) }

// SubscriberFunc keys requests by the subscriber fn returns.
func SubscriberFunc(fn func(r *core.Request) (string, bool)) core.KeyFunc {
	return Func("subscriber", fn)
}

// valueErrors are a value key's errors, built once.
type valueErrors struct {
	kind            string
	none, long, dup error
}

// newValueErrors builds the errors of a value the client sends in where
// ("the X-Tenant header"), or of one set by the application when where is
// empty.
func newValueErrors(kind, where string) *valueErrors {
	if kind == "" {
		kind = "identity"
	}
	e := &valueErrors{
		kind: kind,
		none: &keyError{msg: "keyfunc: no " + kind + " in the request", wraps: []error{core.ErrNoKey}, kind: kind, where: where},
		long: &keyError{msg: fmt.Sprintf("keyfunc: %s longer than %d bytes", kind, MaxValueLen), wraps: []error{ErrMalformed}, kind: kind, where: where},
	}
	if where != "" {
		e.dup = &keyError{msg: "keyfunc: several " + kind + " values in " + where, wraps: []error{ErrMalformed}, kind: kind, where: where}
	}
	return e
}

// Header returns a key function that keys requests by the value of the
// request header name, which must appear on one field line at most. kind
// names the identity in errors and in the 400 a denial answers ("tenant":
// "The request carries no tenant for budget "api"; send it in the
// X-Tenant header."). A request without the header, or with it empty,
// has no key ([core.ErrNoKey]); one with the header on several field
// lines, or longer than [MaxValueLen], has a garbled key ([ErrMalformed]),
// which no budget skips. The value is the key as sent: hash it
// ([Hashed]) when it is a secret. Header panics if name is not a valid
// header field name, so call it at start-up.
func Header(kind, name string) core.KeyFunc {
	if !validFieldName(name) {
		panic(fmt.Sprintf("keyfunc: Header: %q is not a valid header field name", name))
	}
	name = http.CanonicalHeaderKey(name)
	errs := newValueErrors(kind, "the "+name+" header")
	return func(r *core.Request) (string, error) {
		if r.Header == nil {
			return "", errs.none
		}
		vs := r.Header.Values(name)
		if len(vs) > 1 {
			return "", errs.dup
		}
		if len(vs) == 0 {
			return "", errs.none
		}
		return errs.check(vs[0], true)
	}
}

// check turns a converted value into a key or an error. ok false means the
// value had an unsupported type, and s is that type's name.
func (e *valueErrors) check(s string, ok bool) (string, error) {
	switch {
	case !ok:
		return "", newKeyError("keyfunc: "+e.kind+" value of unsupported type "+s, ErrUnsupportedValue, core.ErrNoKey)
	case s == "":
		return "", e.none
	case len(s) > MaxValueLen:
		return "", e.long
	}
	return s, nil
}

// toKey converts a request-scoped value to a string. For an unsupported
// type it returns the type's name and false.
func toKey(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		return v, true
	case []byte:
		return string(v), true
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case fmt.Stringer:
		return stringOf(v)
	}
	return fmt.Sprintf("%T", v), false
}

// stringOf calls s.String, treating a panic (a nil pointer receiver) as no
// value.
func stringOf(s fmt.Stringer) (str string, ok bool) {
	defer func() {
		if recover() != nil {
			str, ok = "", true
		}
	}()
	return s.String(), true
}
