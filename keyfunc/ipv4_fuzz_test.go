package keyfunc

import (
	"net/netip"
	"testing"
)

// FuzzCanonicalIPv4 checks that the dotted-quad fast path accepts exactly
// the strings netip.ParseAddr parses as IPv4, with the same address, so
// normalize behaves as it did with ParseAddr alone.
func FuzzCanonicalIPv4(f *testing.F) {
	for _, s := range []string{
		"1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3.04",
		"00.0.0.0", "1.2.3", "1.2.3.4.", ".1.2.3.4", "1..2.3", "1.2.3.4.5", "",
		"1.2.3.4%eth0", "::ffff:1.2.3.4", "1.2.3.-4", "+1.2.3.4", "1.2.3.4 ",
		"9999999999.1.1.1", "1.2.3.2550", "127.000.0.1", "10.0.0.1:80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := canonicalIPv4(s)
		want, err := netip.ParseAddr(s)
		wantOK := err == nil && want.Is4()
		if ok != wantOK || ok && got != want {
			t.Fatalf("canonicalIPv4(%q) = %v, %v; netip.ParseAddr: %v, %v", s, got, ok, want, err)
		}
	})
}
