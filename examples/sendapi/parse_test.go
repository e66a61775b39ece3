package sendapi

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/keyfunc"
)

func TestParseAccessKey(t *testing.T) {
	cases := []struct {
		lines []string
		key   string
		err   error
	}{
		{nil, "", ErrNoCredential},
		{[]string{"AccessKey ak_acme_1"}, "ak_acme_1", nil},
		{[]string{"accesskey ak_acme_1"}, "ak_acme_1", nil},
		{[]string{"  ACCESSKEY \t ak_acme_1 \t"}, "ak_acme_1", nil},
		{[]string{"AccessKey abc+/=="}, "abc+/==", nil},
		{[]string{"AccessKey"}, "", ErrMalformedCredential},
		{[]string{"AccessKey   "}, "", ErrMalformedCredential},
		{[]string{"AccessKey a b"}, "", ErrMalformedCredential},
		{[]string{"AccessKey a=b"}, "", ErrMalformedCredential},
		{[]string{"AccessKey =="}, "", ErrMalformedCredential},
		{[]string{"AccessKey ak\x00"}, "", ErrMalformedCredential},
		{[]string{"AccessKey " + strings.Repeat("k", MaxAccessKeyLen)}, strings.Repeat("k", MaxAccessKeyLen), nil},
		{[]string{"AccessKey " + strings.Repeat("k", MaxAccessKeyLen+1)}, "", ErrMalformedCredential},
		{[]string{"Bearer ak_acme_1"}, "", ErrNoCredential},
		{[]string{"AccessKeys ak_acme_1"}, "", ErrNoCredential},
		{[]string{"Access"}, "", ErrNoCredential},
		{[]string{""}, "", ErrNoCredential},
		{[]string{"AccessKey a", "AccessKey b"}, "", ErrAmbiguousCredential},
		{[]string{"AccessKey a", "Bearer b"}, "", ErrAmbiguousCredential},
	}
	for _, c := range cases {
		key, err := ParseAccessKey(c.lines)
		if key != c.key || !errors.Is(err, c.err) {
			t.Errorf("ParseAccessKey(%q) = %q, %v; want %q, %v", c.lines, key, err, c.key, c.err)
		}
	}
}

func TestParseIdempotencyKey(t *testing.T) {
	cases := []struct {
		lines []string
		key   string
		err   error
	}{
		{nil, "", nil},
		{[]string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{[]string{" k1 "}, "k1", nil},
		{[]string{`"a\"b"`}, `a"b`, nil},
		{[]string{`a"b`}, `a"b`, nil},
		{[]string{""}, "", ErrMalformedIdempotencyKey},
		{[]string{`""`}, "", ErrMalformedIdempotencyKey},
		{[]string{"a b"}, "", ErrMalformedIdempotencyKey},
		{[]string{`"a b"`}, "", ErrMalformedIdempotencyKey},
		{[]string{`"k";p=1`}, "", ErrMalformedIdempotencyKey},
		{[]string{`"k`}, "", ErrMalformedIdempotencyKey},
		{[]string{"caf\u00e9"}, "", ErrMalformedIdempotencyKey},
		{[]string{strings.Repeat("k", MaxIdempotencyKeyLen)}, strings.Repeat("k", MaxIdempotencyKeyLen), nil},
		{[]string{strings.Repeat("k", MaxIdempotencyKeyLen+1)}, "", ErrMalformedIdempotencyKey},
		{[]string{"a", "a"}, "", ErrAmbiguousIdempotencyKey},
	}
	for _, c := range cases {
		key, err := ParseIdempotencyKey(c.lines)
		if key != c.key || !errors.Is(err, c.err) {
			t.Errorf("ParseIdempotencyKey(%q) = %q, %v; want %q, %v", c.lines, key, err, c.key, c.err)
		}
	}
}

func TestParseSendRequest(t *testing.T) {
	many := func(n int) string {
		return `{"to":[` + strings.TrimSuffix(strings.Repeat(`"r@example.com",`, n), ",") + `]}`
	}
	cases := []struct {
		body string
		n    int // recipients; 0 means an error
	}{
		{`{"to":"a@example.com"}`, 1},
		{`{"to":["a@example.com","+15550100"],"subject":"hi","text":"x"}`, 2},
		{many(MaxRecipients), MaxRecipients},
		{many(MaxRecipients + 1), 0},
		{`{"to":[]}`, 0},
		{`{"to":null}`, 0},
		{`{}`, 0},
		{`null`, 0},
		{`[]`, 0},
		{`{"to":1}`, 0},
		{`{"to":[1]}`, 0},
		{`{"to":[""]}`, 0},
		{`{"to":"a\u0000b"}`, 0},
		{`{"to":"` + strings.Repeat("a", 321) + `"}`, 0},
		{`{"to":"a"`, 0},
		{``, 0},
	}
	for _, c := range cases {
		req, err := ParseSendRequest([]byte(c.body))
		switch {
		case c.n == 0 && err == nil:
			t.Errorf("ParseSendRequest(%.60q) = %v, want an error", c.body, req)
		case c.n > 0 && (err != nil || len(req.To) != c.n):
			t.Errorf("ParseSendRequest(%.60q) = %d recipients, %v; want %d", c.body, len(req.To), err, c.n)
		}
	}
}

func TestParseProxies(t *testing.T) {
	got, err := ParseProxies(" 10.0.0.0/8, 192.0.2.10 ,,2001:db8::/32 ")
	if err != nil || strings.Join(got, "|") != "10.0.0.0/8|192.0.2.10|2001:db8::/32" {
		t.Fatalf("ParseProxies = %q, %v", got, err)
	}
	if got, err := ParseProxies(""); err != nil || len(got) != 0 {
		t.Fatalf("ParseProxies(\"\") = %q, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.internal", "10.0.0.1/8/8", "::1/200", "1.2.3", "fe80::1%eth0"} {
		if _, err := ParseProxies("10.0.0.1," + bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseProxies(%q): %v, want an error naming it", bad, err)
		}
	}
}

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadConfig(t *testing.T) {
	cfg, err := LoadConfig("x", nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:8080" || cfg.Redis != "" || string(cfg.KeySecret) != DefaultKeySecret ||
		cfg.IdempotencyTTL != 24*time.Hour || len(cfg.TrustedProxies) != 0 {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = LoadConfig("x", []string{"-addr", "127.0.0.1:0", "-redis", "127.0.0.1:6379"},
		env(EnvKeySecret, "0123456789abcdef", EnvTrustedProxies, "10.0.0.0/8", EnvIdempotencyTTL, "90m"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:0" || cfg.Redis != "127.0.0.1:6379" || string(cfg.KeySecret) != "0123456789abcdef" ||
		cfg.IdempotencyTTL != 90*time.Minute || len(cfg.TrustedProxies) != 1 {
		t.Fatalf("set: %+v", cfg)
	}
	if s := fmt.Sprintf("%v %+v", cfg, cfg); strings.Contains(s, "0123456789abcdef") {
		t.Fatalf("the configuration prints its secret: %s", s)
	}

	// Every problem is reported at once, and the secret is never repeated.
	_, err = LoadConfig("x", []string{"-redis", "nohost"},
		env(EnvKeySecret, "tooshort", EnvTrustedProxies, "10.0.0.0/33", EnvIdempotencyTTL, "soon"), io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"-redis", EnvKeySecret, EnvTrustedProxies, EnvIdempotencyTTL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "tooshort") {
		t.Errorf("error %q repeats the secret", err)
	}
	for _, ttl := range []string{"0", "-1h", "500ms", "1 day", ""} {
		if _, err := LoadConfig("x", nil, env(EnvIdempotencyTTL, ttl), io.Discard); err == nil {
			t.Errorf("IDEMPOTENCY_TTL=%q accepted", ttl)
		}
	}
	if _, err := LoadConfig("x", []string{"-h"}, env(), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestAccessKeyAgreesWithKeyfunc checks that a key ParseAccessKey accepts
// is the one the management group's key function hashes: the credential
// the request is authenticated with is the one it is counted under.
func TestAccessKeyAgreesWithKeyfunc(t *testing.T) {
	h, err := keyfunc.NewHasher(keyfunc.HashConfig{Secret: keyfunc.Secret(DefaultKeySecret)})
	if err != nil {
		t.Fatal(err)
	}
	kf, err := keyfunc.APIKey(keyfunc.APIKeyConfig{Hasher: h, Scheme: "AccessKey"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"AccessKey ak_acme_1", "accesskey  ak_acme_2\t", "ACCESSKEY\tabc+/=="} {
		key, err := ParseAccessKey([]string{v})
		if err != nil {
			t.Fatal(err)
		}
		got, err := kf(&core.Request{Header: headers{"Authorization": {v}}})
		if err != nil || got != h.Sum(key) {
			t.Errorf("%q: keyfunc key %q, %v; want the hash of %q", v, got, err, key)
		}
	}
}

// headers is a core.HeaderReader over a map of canonical names.
type headers map[string][]string

func (h headers) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h headers) Values(name string) []string { return h[name] }
