package keyfunc

import (
	"fmt"
	"net/netip"
)

// Addresses that carry an IPv4 client inside IPv6 key as that IPv4, so
// that the IPv4 clients behind one translator or relay never share one
// IPv6 prefix's budget, and a dual-stack client spends one budget:
//
//   - NAT64/SIIT (RFC 6052): the well-known prefix 64:ff9b::/96, and the
//     prefixes of IPConfig.NAT64Prefixes (network-specific, or RFC 8215's
//     local-use 64:ff9b:1::/48 at the length the operator chose);
//   - Teredo (RFC 4380, 2001::/32): the client's public IPv4, stored
//     inverted in the last 32 bits;
//   - 6to4 (RFC 3056, 2002::/16): the site's IPv4 in bits 16 to 47.
var (
	wellKnownNAT64 = netip.MustParsePrefix("64:ff9b::/96")
	teredo         = netip.MustParsePrefix("2001::/32")
	sixToFour      = netip.MustParsePrefix("2002::/16")
)

// parseNAT64 parses a NAT64 prefix of IPConfig.NAT64Prefixes: IPv6, of
// one of the lengths RFC 6052 allows.
func parseNAT64(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("keyfunc: NAT64 prefix %q: %v", s, err)
	}
	if !p.Addr().Is6() || p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("keyfunc: NAT64 prefix %q is not an IPv6 prefix", s)
	}
	switch p.Bits() {
	case 32, 40, 48, 56, 64, 96:
		return p.Masked(), nil
	}
	return netip.Prefix{}, fmt.Errorf("keyfunc: NAT64 prefix %q: RFC 6052 allows /32, /40, /48, /56, /64 and /96", s)
}

// embeddedIPv4 returns the IPv4 address a carries, if a is an IPv6
// address of a translator or relay that embeds one.
func (k *IPKey) embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case wellKnownNAT64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case teredo.Contains(a):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	for _, p := range k.nat64 {
		if p.Contains(a) {
			return rfc6052IPv4(b, p.Bits()), true
		}
	}
	return netip.Addr{}, false
}

// rfc6052IPv4 extracts the IPv4 address embedded after a prefix of the
// given length (RFC 6052 section 2.2): bits 64 to 71 (the "u" octet) are
// skipped.
func rfc6052IPv4(b [16]byte, bits int) netip.Addr {
	start := bits / 8
	var v4 [4]byte
	n := 0
	for i := start; n < 4; i++ {
		if i == 8 {
			continue
		}
		v4[n] = b[i]
		n++
	}
	return netip.AddrFrom4(v4)
}
