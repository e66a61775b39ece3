package keyfunc

import "testing"

// TestEmbeddedIPv4KeysByIPv4: an IPv6 address that carries an IPv4
// client (NAT64/SIIT under the well-known prefix or a configured one,
// Teredo, 6to4) keys as that IPv4, so that the IPv4 clients behind one
// translator do not share one /64 budget.
func TestEmbeddedIPv4KeysByIPv4(t *testing.T) {
	k := mustIP(t, IPConfig{NAT64Prefixes: []string{"2001:db8:100::/40", "2001:db8:122:344::/96", "64:ff9b:1::/48"}})
	peer := PeerIP()
	for _, c := range []struct {
		addr, want string
		configured bool // under a prefix of NAT64Prefixes, which PeerIP does not know
	}{
		{"64:ff9b::cb00:7105", "203.0.113.5", false},
		{"64:ff9b::c633:6401", "198.51.100.1", false},
		{"64:ff9b::192.0.2.33", "192.0.2.33", false},
		// RFC 6052 section 2.4's examples of 192.0.2.33 under network-specific prefixes.
		{"2001:db8:1c0:2:21::", "192.0.2.33", true},
		{"2001:db8:122:344::192.0.2.33", "192.0.2.33", true},
		// RFC 8215's local-use prefix, configured as a /48.
		{"64:ff9b:1:c000:2:2100::", "192.0.2.33", true},
		// Teredo (RFC 4380 section 4): client 192.0.2.45 obfuscated in the last 32 bits.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45", false},
		// 6to4 (RFC 3056): the site's IPv4 in bits 16-47.
		{"2002:c000:204::1", "192.0.2.4", false},
		{"2002:c000:204:ffff::1", "192.0.2.4", false},
		// Native IPv6 keeps its /64.
		{"2001:db8:1:2::1", "2001:db8:1:2::/64", false},
	} {
		r := request("[" + c.addr + "]:4000")
		if got, err := k.Key(r); err != nil || got != c.want {
			t.Errorf("IPKey.Key(%s) = %q, %v; want %q", c.addr, got, err, c.want)
		}
		if c.configured {
			continue
		}
		if got, err := peer(r); err != nil || got != c.want {
			t.Errorf("PeerIP(%s) = %q, %v; want %q", c.addr, got, err, c.want)
		}
	}
	if _, err := NewIPKey(IPConfig{NAT64Prefixes: []string{"2001:db8::/33"}}); err == nil {
		t.Error("a NAT64 prefix of /33 was accepted; RFC 6052 allows /32, /40, /48, /56, /64 and /96")
	}
	if _, err := NewIPKey(IPConfig{NAT64Prefixes: []string{"10.0.0.0/8"}}); err == nil {
		t.Error("an IPv4 NAT64 prefix was accepted")
	}
}
