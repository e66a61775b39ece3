package keyfunc

import (
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/core"
)

// MaxAPIKeyLen is the longest credential an API key function hashes, in
// bytes; a longer one is malformed.
const MaxAPIKeyLen = 8192

var (
	errEmptyAPIKey = newKeyError("keyfunc: empty API key", ErrBadCredential)
	errLongAPIKey  = newKeyError("keyfunc: API key longer than "+strconv.Itoa(MaxAPIKeyLen)+" bytes", ErrBadCredential)
	errBadAPIKey   = newKeyError("keyfunc: API key holds control characters", ErrBadCredential)
	errDupAuth     = newKeyError("keyfunc: several Authorization field lines", ErrBadCredential)
	errDupHeader   = newKeyError("keyfunc: several API key header field lines", ErrBadCredential)
	errDupQuery    = newKeyError("keyfunc: several API key query parameters", ErrBadCredential)
)

// ErrBadCredential reports a credential that is present but ambiguous or
// malformed: two Authorization lines, two API key headers or parameters, an
// empty key, one longer than MaxAPIKeyLen or holding control characters.
// Unlike a missing credential it does not wrap core.ErrNoKey, so a budget
// denies the request instead of skipping it or keying it by a fallback (a
// client must not escape its key's budget by sending a second
// Authorization line), and FirstOf does not move on to the next
// alternative.
var ErrBadCredential = errors.New("keyfunc: malformed credential")

// APIKeyConfig configures an API key function. At least one source
// (Scheme, Header, Query or From) must be set; when a request carries
// several, they are tried in that order and the first present decides.
type APIKeyConfig struct {
	// Hasher hashes the credential into the partition key. Required.
	Hasher *Hasher
	// Scheme reads the credential from "Authorization: <Scheme> <key>",
	// e.g. "Bearer" or "AccessKey" (matched case-insensitively). An
	// Authorization header with another scheme is not this source.
	Scheme string
	// Header reads the credential from a header of its own, e.g.
	// "X-API-Key".
	Header string
	// Query reads the credential from a query parameter of this name,
	// e.g. "api_key", read from core.Request.RawQuery (or RawQuery, when
	// set). Query-string credentials end up in access logs and browser
	// histories; prefer a header.
	Query string
	// RawQuery, when set, returns the request's raw (still escaped) query
	// string in place of core.Request.RawQuery.
	RawQuery func(r *core.Request) string
	// From, when set, is the last source: a function returning the raw
	// credential from anywhere else, and whether there is one.
	From func(r *core.Request) (string, bool)
	// Challenge is the WWW-Authenticate challenge a request without a
	// credential is answered with (401, by core.DefaultDeny). Default:
	// Scheme when set (e.g. "Bearer"), else `APIKey header="<Header>"`,
	// else `APIKey query="<Query>"`, else `APIKey`.
	Challenge string
}

// APIKey returns a key function that keys requests by the API key they
// present, hashed with cfg.Hasher: the raw credential never becomes part of
// a key, a log line or an error. A request without a credential gets an
// error wrapping [core.ErrNoKey]; one whose credential is ambiguous (two
// Authorization lines of any schemes, two api-key headers or parameters), empty, longer
// than MaxAPIKeyLen or holding control characters gets an error wrapping
// [ErrBadCredential], which is denied whatever the budget's MissingKey.
//
// The key is that of the presented credential, valid or not: place the
// budget after the middleware that authenticates it, or pair it with an IP
// budget, so that invented keys cannot each get a fresh budget.
func APIKey(cfg APIKeyConfig) (core.KeyFunc, error) {
	var errs []error
	if cfg.Hasher == nil || !cfg.Hasher.ready {
		errs = append(errs, errors.New("keyfunc: APIKeyConfig.Hasher is required (made by NewHasher)"))
	}
	if cfg.Scheme == "" && cfg.Header == "" && cfg.Query == "" && cfg.From == nil {
		errs = append(errs, errors.New("keyfunc: an API key needs a source: Scheme, Header, Query or From"))
	}
	if cfg.Scheme != "" && !validFieldName(cfg.Scheme) {
		errs = append(errs, fmt.Errorf("keyfunc: %q is not a valid authentication scheme", cfg.Scheme))
	}
	header := ""
	if cfg.Header != "" {
		if !validFieldName(cfg.Header) {
			errs = append(errs, fmt.Errorf("keyfunc: %q is not a valid header field name", cfg.Header))
		}
		header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
		if header == "Authorization" {
			errs = append(errs, errors.New("keyfunc: use Scheme to read the Authorization header"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h, scheme, query, rawQuery, from := cfg.Hasher, cfg.Scheme, cfg.Query, cfg.RawQuery, cfg.From
	if rawQuery == nil {
		rawQuery = func(r *core.Request) string { return r.RawQuery }
	}
	missing := &core.MissingCredentialError{Challenge: challenge(cfg), Where: where(cfg), Msg: "keyfunc: no API key in the request"}
	return func(r *core.Request) (string, error) {
		raw, err := findAPIKey(r, scheme, header, query, rawQuery, from, missing)
		if err != nil {
			return "", err
		}
		if err := checkCredential(raw); err != nil {
			return "", err
		}
		return h.Sum(raw), nil
	}, nil
}

// findAPIKey returns the raw credential of r from the first source
// present, or missing when none is.
func findAPIKey(r *core.Request, scheme, header, query string, rawQuery func(*core.Request) string, from func(*core.Request) (string, bool), missing error) (string, error) {
	if r.Header != nil {
		if scheme != "" {
			// Two Authorization lines are refused whatever their
			// schemes: the authenticating middleware may read the
			// other one, and the budget would then be keyed by an
			// unchecked credential.
			switch lines := r.Header.Values("Authorization"); len(lines) {
			case 0:
			case 1:
				if c, ok := credential(lines[0], scheme); ok {
					return c, nil
				}
			default:
				return "", errDupAuth
			}
		}
		if header != "" {
			switch lines := r.Header.Values(header); len(lines) {
			case 0:
			case 1:
				return trimOWS(lines[0]), nil
			default:
				return "", errDupHeader
			}
		}
	}
	if query != "" {
		if v, ok, err := queryParam(rawQuery(r), query); err != nil || ok {
			return v, err
		}
	}
	if from != nil {
		if v, ok := from(r); ok {
			return v, nil
		}
	}
	return "", missing
}

// challenge is the WWW-Authenticate challenge of a request without the
// credential cfg reads. The header is named as the configuration spells
// it: header names are case-insensitive, but a client reads the challenge.
func challenge(cfg APIKeyConfig) string {
	switch {
	case cfg.Challenge != "":
		return cfg.Challenge
	case cfg.Scheme != "":
		return cfg.Scheme
	case cfg.Header != "":
		return `APIKey header="` + cfg.Header + `"`
	case cfg.Query != "":
		return `APIKey query="` + cfg.Query + `"`
	}
	return "APIKey"
}

// where says where a request carries the credential cfg reads, for a
// client told it has none.
func where(cfg APIKeyConfig) string {
	var places []string
	if cfg.Scheme != "" {
		places = append(places, "the Authorization header (scheme "+cfg.Scheme+")")
	}
	if cfg.Header != "" {
		places = append(places, "the "+cfg.Header+" header")
	}
	if cfg.Query != "" {
		places = append(places, "the "+cfg.Query+" query parameter")
	}
	return strings.Join(places, " or ")
}

// credential returns the credential of an Authorization value when its
// scheme is scheme: "Bearer abc" → "abc".
func credential(v, scheme string) (string, bool) {
	v = trimOWS(v)
	if len(v) < len(scheme) || !asciiEqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	rest := v[len(scheme):]
	if rest != "" && !isOWS(rest[0]) {
		return "", false // "Bearerx ..." is another scheme
	}
	return trimOWS(rest), true
}

func checkCredential(s string) error {
	if s == "" {
		return errEmptyAPIKey
	}
	if len(s) > MaxAPIKeyLen {
		return errLongAPIKey
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return errBadAPIKey
		}
	}
	return nil
}

// queryParam returns the value of the parameter name in the raw query q,
// unescaped. ok is false when it is absent; a parameter given twice is an
// error. Pairs are read as url.ParseQuery reads them (and so as
// net/http's Request.URL.Query()): a pair holding ";" or an invalid escape
// is ignored.
func queryParam(q, name string) (value string, ok bool, err error) {
	for q != "" {
		var pair string
		if i := strings.IndexByte(q, '&'); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			pair, q = q, ""
		}
		if pair == "" {
			continue
		}
		if strings.IndexByte(pair, ';') >= 0 {
			continue // url.ParseQuery drops such pairs too
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			uk, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			k = uk
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			uv, err := url.QueryUnescape(v)
			if err != nil {
				continue
			}
			v = uv
		}
		if ok {
			return "", false, errDupQuery
		}
		value, ok = v, true
	}
	return value, ok, nil
}

// asciiEqualFold reports whether a and b are equal under ASCII case folding.
func asciiEqualFold(a, b string) bool {
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
