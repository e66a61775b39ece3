package keyfunc

import (
	"context"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
)

func benchKey(b *testing.B, kf core.KeyFunc, r *core.Request) {
	b.Helper()
	if _, err := kf(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_, _ = kf(r)
	}
}

func BenchmarkIPPeerIPv4(b *testing.B) {
	benchKey(b, PeerIP(), request(client+":5555"))
}

func BenchmarkIPPeerIPv6(b *testing.B) {
	benchKey(b, PeerIP(), request("[2001:db8:1:2:3:4:5:6]:5555"))
}

// An untrusted peer sending forwarding headers: they are never read.
func BenchmarkIPUntrustedPeerWithHeaders(b *testing.B) {
	benchKey(b, mustIP(b, cfgXFF).Key, request(client+":5555", h("X-Forwarded-For", attacker+", 1.2.3.4")))
}

func BenchmarkIPXForwardedFor(b *testing.B) {
	benchKey(b, mustIP(b, cfgXFF).Key, request(proxy2+":80", h("X-Forwarded-For", attacker+", "+client+", "+proxy1)))
}

func BenchmarkIPXForwardedForIPv6(b *testing.B) {
	benchKey(b, mustIP(b, cfgXFF).Key, request(proxy2+":80", h("X-Forwarded-For", "2001:db8:1:2::99, "+proxy1)))
}

func BenchmarkIPForwarded(b *testing.B) {
	benchKey(b, mustIP(b, cfgFwd).Key, request(proxy2+":80", h("Forwarded", `for="`+client+`:4711";proto=https, for=`+proxy1)))
}

func BenchmarkIPForwardedIPv6(b *testing.B) {
	benchKey(b, mustIP(b, cfgFwd).Key, request(proxy1+":80", h("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https`)))
}

func BenchmarkIPClientIPHeader(b *testing.B) {
	benchKey(b, mustIP(b, cfgCF).Key, request(proxy1+":80", h("CF-Connecting-IP", client)))
}

func BenchmarkAPIKeyBearer(b *testing.B) {
	hs := mustHasher(b, HashConfig{Secret: testSecret})
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Scheme: "Bearer"})
	if err != nil {
		b.Fatal(err)
	}
	benchKey(b, kf, request("", h("Authorization", "Bearer "+rawKey)))
}

func BenchmarkAPIKeyHeaderBase64(b *testing.B) {
	hs := mustHasher(b, HashConfig{Secret: testSecret, Encoding: Base64})
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Header: "X-API-Key"})
	if err != nil {
		b.Fatal(err)
	}
	benchKey(b, kf, request("", h("X-API-Key", rawKey)))
}

func BenchmarkTenant(b *testing.B) {
	r := &core.Request{Context: context.WithValue(context.Background(), ctxKey("tenant"), "acme")}
	benchKey(b, Tenant(ctxKey("tenant")), r)
}

func BenchmarkCompositeTenantOperator(b *testing.B) {
	r := request(client + ":1")
	r.Values = mapValues{"tenant": "acme", "operator": "alice"}
	benchKey(b, Composite(Tenant("tenant"), Operator("operator")), r)
}

func BenchmarkFirstOfTenantElseIP(b *testing.B) {
	benchKey(b, FirstOf(Tenant("tenant"), PeerIP()), request(client+":1"))
}

// longChain is a forwarding chain of n entries a client wrote, then the
// client and one trusted proxy, as the nearest proxy appends them.
func longChain(n int, entry, client, proxy string) string {
	var b strings.Builder
	for range n {
		b.WriteString(entry)
		b.WriteString(", ")
	}
	b.WriteString(client + ", " + proxy)
	return b.String()
}

// A 10,000-entry X-Forwarded-For: only the two entries at its right end
// are parsed.
func BenchmarkIPXForwardedForLong(b *testing.B) {
	benchKey(b, mustIP(b, cfgXFF).Key, request(proxy2+":80", h("X-Forwarded-For", longChain(10000, "9.9.9.9", client, proxy1))))
}

// A 10,000-element Forwarded line: its elements are found by one byte
// scan, and only the two at its right end are parsed.
func BenchmarkIPForwardedLong(b *testing.B) {
	benchKey(b, mustIP(b, cfgFwd).Key, request(proxy2+":80", h("Forwarded", longChain(10000, "for=9.9.9.9", "for="+client, "for="+proxy1))))
}
