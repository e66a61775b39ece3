package keyfunc

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/quotagate/quotagate/core"
)

var testSecret = Secret("0123456789abcdef0123456789abcdef")

func mustHasher(t testing.TB, cfg HashConfig) *Hasher {
	t.Helper()
	hs, err := NewHasher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func refHMAC(secret []byte, s string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// TestHasherRFC4231 checks the hasher against RFC 4231 test case 2 (a
// 20-byte key of 0x0b, data "Hi There").
func TestHasherRFC4231(t *testing.T) {
	key := Secret(bytes.Repeat([]byte{0x0b}, 20))
	const full = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
	if got := mustHasher(t, HashConfig{Secret: key, Size: 32}).Sum("Hi There"); got != full {
		t.Fatalf("full digest %s, want %s", got, full)
	}
	if got := mustHasher(t, HashConfig{Secret: key}).Sum("Hi There"); got != full[:32] {
		t.Fatalf("default digest %s, want the first 16 bytes %s", got, full[:32])
	}
	raw, _ := hex.DecodeString(full)
	want := base64.RawURLEncoding.EncodeToString(raw[:12])
	if got := mustHasher(t, HashConfig{Secret: key, Size: 12, Encoding: Base64}).Sum("Hi There"); got != want {
		t.Fatalf("base64 digest %s, want %s", got, want)
	}
}

func TestHasherInputs(t *testing.T) {
	hs := mustHasher(t, HashConfig{Secret: testSecret, Size: 32})
	long := strings.Repeat("k", 5000) // beyond the pooled buffer
	for _, s := range []string{"", "a", "sk_live_123", long, "ünïcödé"} {
		want := hex.EncodeToString(refHMAC(testSecret, s))
		if got := hs.Sum(s); got != want {
			t.Errorf("Sum(%.20q) = %s, want %s", s, got, want)
		}
	}
	other := mustHasher(t, HashConfig{Secret: Secret("another secret of 32 bytes......"), Size: 32})
	if hs.Sum("x") == other.Sum("x") {
		t.Fatal("two secrets give the same key")
	}
	if hs.String() != "hmac-sha256/32/hex" {
		t.Fatalf("String %q", hs.String())
	}
}

func TestHasherConcurrent(t *testing.T) {
	hs := mustHasher(t, HashConfig{Secret: testSecret})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				s := fmt.Sprintf("key-%d-%d", g, i)
				want := hex.EncodeToString(refHMAC(testSecret, s)[:16])
				if got := hs.Sum(s); got != want {
					errs <- fmt.Sprintf("Sum(%q) = %s, want %s", s, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestNewHasherErrors(t *testing.T) {
	secret := "short-secret!!!" // 15 bytes
	_, err := NewHasher(HashConfig{Secret: Secret(secret)})
	if err == nil || !strings.Contains(err.Error(), "15 bytes") {
		t.Fatalf("short secret: %v", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("the error quotes the secret")
	}
	for _, size := range []int{-1, 7, 33} {
		if _, err := NewHasher(HashConfig{Secret: testSecret, Size: size}); err == nil {
			t.Errorf("size %d accepted", size)
		}
	}
	if _, err := NewHasher(HashConfig{Secret: testSecret, Encoding: 3}); err == nil {
		t.Error("unknown encoding accepted")
	}
	// The secret is copied.
	s := append(Secret(nil), testSecret...)
	hs := mustHasher(t, HashConfig{Secret: s})
	before := hs.Sum("x")
	s[0] ^= 0xff
	if hs.Sum("x") != before {
		t.Fatal("changing the caller's secret changed the hasher")
	}
}

func TestSecretRedacted(t *testing.T) {
	cfg := HashConfig{Secret: testSecret}
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q", "%d"} {
		out := fmt.Sprintf(f, cfg)
		if strings.Contains(out, string(testSecret)) || strings.Contains(out, hex.EncodeToString(testSecret)) || strings.Contains(out, "48 49 50") {
			t.Errorf("%s prints the secret: %s", f, out)
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("%s: %s", f, out)
		}
	}
}

func TestHashed(t *testing.T) {
	hs := mustHasher(t, HashConfig{Secret: testSecret})
	kf := Hashed(hs, Subscriber("email"))
	r := request("192.0.2.1:1")
	r.Values = mapValues{"email": "alice@example.com"}
	got, err := kf(r)
	if err != nil || got != hs.Sum("alice@example.com") || strings.Contains(got, "alice") {
		t.Fatalf("Hashed: %q, %v", got, err)
	}
	if _, err := kf(request("192.0.2.1:1")); !errors.Is(err, core.ErrNoKey) {
		t.Fatalf("Hashed without value: %v", err)
	}
}

const rawKey = "sk_live_RAWSECRET_4f9a0c"

type apiCase struct {
	name    string
	r       *core.Request
	want    string // raw credential expected to be hashed; "" for an error
	wantErr error
}

func TestAPIKeySources(t *testing.T) {
	hs := mustHasher(t, HashConfig{Secret: testSecret})
	rawQuery := func(r *core.Request) string { s, _ := r.Value("rawquery").(string); return s }
	withQuery := func(q string, hdrs ...header) *core.Request {
		r := request("192.0.2.1:1", hdrs...)
		r.Values = mapValues{"rawquery": q}
		return r
	}
	withFrom := func(v string) *core.Request {
		r := request("192.0.2.1:1")
		r.Values = mapValues{"from": v}
		return r
	}
	kf, err := APIKey(APIKeyConfig{
		Hasher: hs, Scheme: "Bearer", Header: "x-api-key", Query: "api_key", RawQuery: rawQuery,
		From: func(r *core.Request) (string, bool) { s, ok := r.Value("from").(string); return s, ok },
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []apiCase{
		{name: "bearer", r: request("", h("Authorization", "Bearer "+rawKey)), want: rawKey},
		{name: "bearer lower-case scheme and spaces", r: request("", h("Authorization", "  bearer \t "+rawKey+" ")), want: rawKey},
		{name: "header", r: request("", h("X-API-Key", rawKey)), want: rawKey},
		{name: "header beats query", r: withQuery("api_key=other", h("X-Api-Key", rawKey)), want: rawKey},
		{name: "bearer beats header", r: request("", h("X-API-Key", "other"), h("Authorization", "Bearer "+rawKey)), want: rawKey},
		{name: "other scheme falls through", r: request("", h("Authorization", "Basic dXNlcjpwYXNz"), h("X-API-Key", rawKey)), want: rawKey},
		{name: "Bearerx is another scheme", r: request("", h("Authorization", "Bearerx "+rawKey)), wantErr: core.ErrNoKey},
		{name: "query", r: withQuery("a=1&api_key=" + rawKey + "&b=2"), want: rawKey},
		{name: "query escaped", r: withQuery("api%5Fkey=sk%2Blive+x"), want: "sk+live x"},
		{name: "query duplicate", r: withQuery("api_key=a&api_key=b"), wantErr: ErrBadCredential},
		{name: "query bad escape is ignored", r: withQuery("api_key=%zz&api_key=" + rawKey), want: rawKey},
		{name: "query semicolon pair is ignored", r: withQuery("api_key=a;b"), wantErr: core.ErrNoKey},
		{name: "query empty value", r: withQuery("api_key="), wantErr: ErrBadCredential},
		{name: "query other params only", r: withQuery("x=1&&y"), wantErr: core.ErrNoKey},
		{name: "from", r: withFrom(rawKey), want: rawKey},
		{name: "none", r: request(""), wantErr: core.ErrNoKey},
		{name: "nil header", r: &core.Request{}, wantErr: core.ErrNoKey},
		{name: "two authorization lines", r: request("", h("Authorization", "Bearer "+rawKey), h("Authorization", "Bearer other")), wantErr: ErrBadCredential},
		{name: "two authorization lines, other scheme", r: request("", h("Authorization", "Basic x"), h("Authorization", "Bearer "+rawKey)), wantErr: ErrBadCredential},
		{name: "two header lines", r: request("", h("X-API-Key", rawKey), h("X-API-Key", "other")), wantErr: ErrBadCredential},
		{name: "empty bearer", r: request("", h("Authorization", "Bearer")), wantErr: ErrBadCredential},
		{name: "blank bearer", r: request("", h("Authorization", "Bearer   ")), wantErr: ErrBadCredential},
		{name: "empty header", r: request("", h("X-API-Key", "")), wantErr: ErrBadCredential},
		{name: "control character", r: request("", h("X-API-Key", rawKey+"\x01")), wantErr: ErrBadCredential},
		{name: "too long", r: request("", h("X-API-Key", strings.Repeat("k", MaxAPIKeyLen+1))), wantErr: ErrBadCredential},
		{name: "longest", r: request("", h("X-API-Key", strings.Repeat("k", MaxAPIKeyLen))), want: strings.Repeat("k", MaxAPIKeyLen)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := kf(c.r)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || errors.Is(err, core.ErrNoKey) != (c.wantErr == core.ErrNoKey) {
					t.Fatalf("key %q, error %v; want an error wrapping %v", got, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := hs.Sum(c.want); got != want {
				t.Fatalf("key %q, want %q (the hash of %.20q)", got, want, c.want)
			}
		})
	}
}

func TestAPIKeyNamedScheme(t *testing.T) {
	hs := mustHasher(t, HashConfig{Secret: testSecret, Encoding: Base64})
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Scheme: "AccessKey"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := kf(request("", h("Authorization", "AccessKey "+rawKey)))
	if err != nil || got != hs.Sum(rawKey) {
		t.Fatalf("AccessKey: %q, %v", got, err)
	}
	if _, err := kf(request("", h("Authorization", "Bearer "+rawKey))); !errors.Is(err, core.ErrNoKey) {
		t.Fatalf("a Bearer credential was read for the AccessKey scheme: %v", err)
	}
	a, _ := kf(request("", h("Authorization", "AccessKey key-a")))
	b, _ := kf(request("", h("Authorization", "AccessKey key-b")))
	if a == b || a == "" {
		t.Fatalf("distinct keys share a partition: %q %q", a, b)
	}
}

func TestAPIKeyErrors(t *testing.T) {
	hs := mustHasher(t, HashConfig{Secret: testSecret})
	cases := []struct {
		name string
		cfg  APIKeyConfig
		want string
	}{
		{"no hasher", APIKeyConfig{Scheme: "Bearer"}, "Hasher"},
		{"zero hasher", APIKeyConfig{Hasher: &Hasher{}, Scheme: "Bearer"}, "NewHasher"},
		{"no source", APIKeyConfig{Hasher: hs}, "source"},
		{"bad scheme", APIKeyConfig{Hasher: hs, Scheme: "Bear er"}, "scheme"},
		{"bad header", APIKeyConfig{Hasher: hs, Header: "X-API Key"}, "header"},
		{"authorization as header", APIKeyConfig{Hasher: hs, Header: "authorization"}, "Scheme"},
	}
	for _, c := range cases {
		if _, err := APIKey(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

func TestAPIKeyAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts are checked without -short and -race")
	}
	hs := mustHasher(t, HashConfig{Secret: testSecret})
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Scheme: "Bearer", Header: "X-API-Key"})
	if err != nil {
		t.Fatal(err)
	}
	hit := request("", h("Authorization", "Bearer "+rawKey))
	miss := request("")
	if n := testing.AllocsPerRun(200, func() { _, _ = kf(hit) }); n > 1 {
		t.Errorf("hashing an API key: %.1f allocs, want at most 1", n)
	}
	if n := testing.AllocsPerRun(200, func() { _, _ = kf(miss) }); n > 0 {
		t.Errorf("a request without a key: %.1f allocs, want 0", n)
	}
}

// mapValues is a core.ValueReader over a map, as an adapter for Gin keys
// or Fiber locals would provide.
type mapValues map[any]any

func (m mapValues) Value(k any) any { return m[k] }

func TestAPIKeyFromRequestRawQuery(t *testing.T) {
	hs, err := NewHasher(HashConfig{Secret: Secret("k3y-secret-for-tests")})
	if err != nil {
		t.Fatal(err)
	}
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Query: "api_key"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := kf(&core.Request{RawQuery: "a=1&api_key=s%65cret"})
	if err != nil || got != hs.Sum("secret") {
		t.Fatalf("key %q, %v; want the hash of the unescaped value", got, err)
	}
	if _, err := kf(&core.Request{RawQuery: "a=1"}); !errors.Is(err, core.ErrNoKey) {
		t.Fatalf("missing parameter: %v", err)
	}
}

// TestAPIKeyChallengeKeepsTheHeaderAsWritten: the challenge and the
// missing-credential error name the header as configured (X-API-Key, not
// X-Api-Key), and say where to send the key.
func TestAPIKeyChallengeKeepsTheHeaderAsWritten(t *testing.T) {
	kf, err := APIKey(APIKeyConfig{Hasher: mustHasher(t, HashConfig{Secret: testSecret}), Header: "X-API-Key", Query: "api_key"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kf(request("198.51.100.1:1"))
	var mc *core.MissingCredentialError
	if !errors.As(err, &mc) {
		t.Fatalf("error %v", err)
	}
	if mc.Challenge != `APIKey header="X-API-Key"` || mc.Where != "the X-API-Key header or the api_key query parameter" {
		t.Errorf("challenge %q, where %q", mc.Challenge, mc.Where)
	}
}
