package sendapi

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/keyfunc"
)

// FuzzParseAccessKey: an accepted key is a token68 of bounded length, reads
// back the same from a canonical header, and is the credential the
// management group's key function hashes.
func FuzzParseAccessKey(f *testing.F) {
	for _, s := range []string{"AccessKey ak_acme_1", "accesskey\tabc==", "AccessKey", "AccessKeys x", "Bearer x", " AccessKey  a+/b= ", "AccessKey a b"} {
		f.Add(s)
	}
	h, err := keyfunc.NewHasher(keyfunc.HashConfig{Secret: keyfunc.Secret(DefaultKeySecret)})
	if err != nil {
		f.Fatal(err)
	}
	kf, err := keyfunc.APIKey(keyfunc.APIKeyConfig{Hasher: h, Scheme: "AccessKey"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseAccessKey([]string{v})
		if err != nil {
			if key != "" {
				t.Fatalf("%q: key %q with error %v", v, key, err)
			}
			return
		}
		if key == "" || len(key) > MaxAccessKeyLen || !isToken68(key) {
			t.Fatalf("%q: accepted key %q", v, key)
		}
		if again, err := ParseAccessKey([]string{"AccessKey " + key}); err != nil || again != key {
			t.Fatalf("%q: key %q reads back as %q, %v", v, key, again, err)
		}
		got, err := kf(&core.Request{Header: headers{"Authorization": {v}}})
		if err != nil || got != h.Sum(key) {
			t.Fatalf("%q: the management key function keys %q, %v; want the hash of %q", v, got, err, key)
		}
	})
}

// FuzzParseIdempotencyKey: an accepted key is 1 to 255 visible ASCII
// characters, and its sf-string form is the same key.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"k1", `"k1"`, `"a\"b"`, `"k";a=1`, `""`, " ", "a b", `"\`, "8e03978e-40d5-43e8-bc93-6894a57f9324"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseIdempotencyKey([]string{v})
		if err != nil {
			if key != "" {
				t.Fatalf("%q: key %q with error %v", v, key, err)
			}
			return
		}
		if key == "" || len(key) > MaxIdempotencyKeyLen {
			t.Fatalf("%q: accepted key %q", v, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] <= ' ' || key[i] >= 0x7f {
				t.Fatalf("%q: accepted key %q holds byte %#x", v, key, key[i])
			}
		}
		quoted, err := httpsfv.Marshal(httpsfv.NewItem(key))
		if err != nil {
			t.Fatalf("%q: key %q does not serialize as an sf-string: %v", v, key, err)
		}
		if again, err := ParseIdempotencyKey([]string{quoted}); err != nil || again != key {
			t.Fatalf("%q: key %q as %s reads %q, %v", v, key, quoted, again, err)
		}
		if !strings.HasPrefix(key, `"`) {
			if again, err := ParseIdempotencyKey([]string{key}); err != nil || again != key {
				t.Fatalf("%q: bare key %q reads %q, %v", v, key, again, err)
			}
		}
	})
}

// FuzzParseSendRequest: an accepted send has 1 to 100 valid recipients,
// and the same recipients re-encoded parse the same.
func FuzzParseSendRequest(f *testing.F) {
	for _, s := range []string{`{"to":"a@example.com"}`, `{"to":["a","b"]}`, `{"to":[]}`, `{"to":null}`, `[]`, `{"to":"a\u0000"}`, `{"to":["a",1]}`, `{"to":"x","to":["y"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseSendRequest(body)
		if err != nil {
			return
		}
		if len(req.To) < 1 || len(req.To) > MaxRecipients {
			t.Fatalf("%q: %d recipients accepted", body, len(req.To))
		}
		for _, r := range req.To {
			if r == "" || len(r) > maxRecipientLen || strings.ContainsFunc(r, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
				t.Fatalf("%q: recipient %q accepted", body, r)
			}
		}
		b, err := json.Marshal(map[string][]string{"to": req.To})
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSendRequest(b)
		if err != nil || !slices.Equal(again.To, req.To) {
			t.Fatalf("%q: re-encoded %s parses as %q, %v", body, b, again.To, err)
		}
	})
}

// FuzzParseProxies: every accepted entry is a prefix or an address, and
// the accepted list parses back to itself.
func FuzzParseProxies(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.0.0.0/8, 192.0.2.1", "", ",,", "::1/200", "proxy", "::ffff:10.0.0.1/104", "fe80::1%eth0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseProxies(s)
		if err != nil {
			return
		}
		for _, p := range got {
			_, perr := netip.ParsePrefix(p)
			_, aerr := netip.ParseAddr(p)
			if perr != nil && aerr != nil {
				t.Fatalf("%q: accepted entry %q", s, p)
			}
		}
		again, err := ParseProxies(strings.Join(got, ","))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("%q: %q parses back as %q, %v", s, got, again, err)
		}
	})
}
