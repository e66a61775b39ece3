package keyfunc

import (
	"errors"
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/core"
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are grouped by unless
// IPConfig.IPv6Prefix says otherwise: one /64 is what a single subscriber
// usually gets, and addresses rotate freely inside it.
const DefaultIPv6Prefix = 64

// Smallest and largest IPv6 prefix lengths IPConfig accepts.
const (
	MinIPv6Prefix = 32
	MaxIPv6Prefix = 128
)

// ErrMalformed reports a client address, forwarding header or identity
// that could not be parsed, is too long or is repeated. It wraps
// [core.ErrNoKey] and [core.ErrBadKey]: a budget denies the request, or
// with MissingKeyFallback keys it by its fallback, but never skips it (see
// core.Budget.MissingKey), so garbling a key never costs a client less
// than sending a valid one. Errors returned by this package never contain
// the offending value.
var ErrMalformed = newKeyError("keyfunc: malformed input", core.ErrNoKey, core.ErrBadKey)

// Errors of IP keys. They are allocated once, so a flood of bad requests
// costs no allocation.
var (
	errBadPeer      = newKeyError("keyfunc: unparsable peer address", ErrMalformed)
	errBadForwarded = newKeyError("keyfunc: unparsable entry in the Forwarded chain", ErrMalformed)
	errBadXFF       = newKeyError("keyfunc: unparsable entry in the X-Forwarded-For chain", ErrMalformed)
	errBadSingle    = newKeyError("keyfunc: unparsable client address header", ErrMalformed)
)

// Malformed says what an IP key does when a forwarding header it must read
// (one sent by a trusted proxy) holds an entry it cannot parse.
type Malformed int

const (
	// MalformedReject returns an error wrapping [ErrMalformed] (and so
	// [core.ErrNoKey]); the budget's MissingKey action decides what
	// happens: deny the request, skip the budget, or key it with
	// FallbackKey, typically a shared [Constant] bucket. It is the
	// default; see the package documentation for why.
	MalformedReject Malformed = iota
	// MalformedUsePeer keys the request by the peer address, the trusted proxy
	// that sent the header, so every request it forwards with a broken
	// header shares one budget.
	MalformedUsePeer
)

// String returns "reject" or "use_peer".
func (m Malformed) String() string {
	switch m {
	case MalformedReject:
		return "reject"
	case MalformedUsePeer:
		return "use_peer"
	}
	return "Malformed(" + strconv.Itoa(int(m)) + ")"
}

type sourceKind uint8

const (
	srcForwarded sourceKind = iota + 1
	srcXFF
	srcSingle
)

// A Source is a forwarding header an IP key reads when the peer is a trusted
// proxy: [Forwarded], [XForwardedFor], [XRealIP] or a [ClientIPHeader].
type Source struct {
	kind sourceKind
	name string
}

// Name returns the header field name the source reads.
func (s Source) Name() string { return s.name }

// String returns the header field name the source reads.
func (s Source) String() string { return s.name }

var (
	// Forwarded is the RFC 7239 Forwarded header. All field lines are
	// read in order, each parsed on its own, and the for= node of every
	// element is walked from the right: the first address that is not a
	// trusted proxy is the client.
	Forwarded = Source{kind: srcForwarded, name: "Forwarded"}
	// XForwardedFor is the X-Forwarded-For header. All field lines are
	// merged in order and walked from the right: the first address that
	// is not a trusted proxy is the client. Entries may carry a port
	// ("192.0.2.1:4711", "[2001:db8::1]:4711").
	XForwardedFor = Source{kind: srcXFF, name: "X-Forwarded-For"}
	// XRealIP is the single-address X-Real-IP header (nginx realip).
	XRealIP = Source{kind: srcSingle, name: "X-Real-Ip"}
)

// ClientIPHeader returns a source for a header that carries exactly one
// client address, set by an edge proxy that overwrites it on every request:
// "CF-Connecting-IP" (Cloudflare), "True-Client-IP" (Akamai), "Fly-Client-IP".
// When the header occurs several times, the last field line is used (an edge
// that appends rather than replaces puts its value last). A value holding more
// than one address is malformed. The name is checked by [IP].
func ClientIPHeader(name string) Source {
	return Source{kind: srcSingle, name: textproto.CanonicalMIMEHeaderKey(name)}
}

// IPConfig configures an IP key. The zero value keys every request by its
// peer address (core.Request.RemoteAddr), IPv6 peers grouped by /64, and
// reads no header.
type IPConfig struct {
	// TrustedProxies lists the proxies whose forwarding headers are
	// believed, as CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single
	// addresses ("192.0.2.10"). IPv4-mapped IPv6 prefixes of /96 or longer
	// are converted to IPv4 (addresses are unmapped before every check).
	// List exactly your proxies: any host inside these ranges can claim
	// to be anyone. Requires Headers.
	TrustedProxies []string
	// Headers lists the forwarding headers to read, in order of
	// precedence, when the peer is a trusted proxy. The first one the
	// request carries (with at least one non-empty entry) decides; later
	// ones are not consulted. Name only headers your proxies set or
	// overwrite. Requires TrustedProxies.
	Headers []Source
	// IPv6Prefix is the prefix length IPv6 clients are grouped by,
	// MinIPv6Prefix to MaxIPv6Prefix; 0 means DefaultIPv6Prefix (64).
	IPv6Prefix int
	// OnMalformed says what to do when a header entry that must be walked
	// cannot be parsed. The zero value is MalformedReject.
	OnMalformed Malformed
	// NAT64Prefixes lists the network's own NAT64/SIIT prefixes (RFC
	// 6052: /32, /40, /48, /56, /64 or /96), under which an IPv6 client
	// address carries an IPv4 one: such clients key as their IPv4 address,
	// not as the translator's IPv6 prefix. The well-known prefix
	// 64:ff9b::/96, Teredo (2001::/32) and 6to4 (2002::/16) need no entry.
	NAT64Prefixes []string
}

// IPKey derives client addresses and IP partition keys. Create it with
// [NewIPKey]; it is safe for concurrent use.
type IPKey struct {
	trusted     []netip.Prefix
	sources     []Source
	nat64       []netip.Prefix
	v6bits      int
	onMalformed Malformed
}

// NewIPKey validates cfg and returns an IPKey. Every problem (an invalid CIDR,
// a prefix length out of range, headers without trusted proxies, ...) is
// reported in the error.
func NewIPKey(cfg IPConfig) (*IPKey, error) {
	k := &IPKey{v6bits: cfg.IPv6Prefix, onMalformed: cfg.OnMalformed}
	var errs []error
	if k.v6bits == 0 {
		k.v6bits = DefaultIPv6Prefix
	}
	if k.v6bits < MinIPv6Prefix || k.v6bits > MaxIPv6Prefix {
		errs = append(errs, fmt.Errorf("keyfunc: IPv6 prefix /%d is outside /%d to /%d", cfg.IPv6Prefix, MinIPv6Prefix, MaxIPv6Prefix))
	}
	if k.onMalformed != MalformedReject && k.onMalformed != MalformedUsePeer {
		errs = append(errs, fmt.Errorf("keyfunc: unknown malformed-header policy %d", int(cfg.OnMalformed)))
	}
	for _, s := range cfg.TrustedProxies {
		p, err := parseTrusted(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k.trusted = append(k.trusted, p)
	}
	for _, s := range cfg.NAT64Prefixes {
		p, err := parseNAT64(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k.nat64 = append(k.nat64, p)
	}
	// The longest prefix that holds an address decides.
	slices.SortFunc(k.nat64, func(a, b netip.Prefix) int { return b.Bits() - a.Bits() })
	seen := map[string]bool{}
	for _, src := range cfg.Headers {
		switch {
		case src.kind == 0:
			errs = append(errs, errors.New("keyfunc: zero Source in Headers; use Forwarded, XForwardedFor, XRealIP or ClientIPHeader"))
			continue
		case !validFieldName(src.name):
			errs = append(errs, fmt.Errorf("keyfunc: %q is not a valid header field name", src.name))
			continue
		case src.kind == srcSingle && (src.name == Forwarded.name || src.name == XForwardedFor.name):
			errs = append(errs, fmt.Errorf("keyfunc: %s is a list; use the keyfunc.%s source, not ClientIPHeader", src.name, strings.ReplaceAll(src.name, "-", "")))
			continue
		case seen[src.name]:
			errs = append(errs, fmt.Errorf("keyfunc: header %s is listed twice", src.name))
			continue
		}
		seen[src.name] = true
		k.sources = append(k.sources, src)
	}
	if len(cfg.TrustedProxies) > 0 && len(cfg.Headers) == 0 {
		errs = append(errs, errors.New("keyfunc: trusted proxies are set but no forwarding header is named in Headers"))
	}
	if len(cfg.Headers) > 0 && len(cfg.TrustedProxies) == 0 {
		errs = append(errs, errors.New("keyfunc: forwarding headers are read only from trusted proxies; set TrustedProxies"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return k, nil
}

// IP returns a key function that keys requests by client address as cfg
// says: IPv4 addresses exactly ("192.0.2.1"), IPv6 addresses by their
// prefix ("2001:db8:1:2::/64"), and IPv6 addresses that carry an IPv4
// client (NAT64/SIIT, Teredo, 6to4) by that IPv4 address. It is NewIPKey(cfg) followed by [IPKey.Key].
func IP(cfg IPConfig) (core.KeyFunc, error) {
	k, err := NewIPKey(cfg)
	if err != nil {
		return nil, err
	}
	return k.Key, nil
}

// PeerIP returns a key function that keys requests by their peer address
// alone, IPv6 peers grouped by /64: IP(IPConfig{}).
func PeerIP() core.KeyFunc {
	k := &IPKey{v6bits: DefaultIPv6Prefix}
	return k.Key
}

// parseTrusted parses a trusted-proxy CIDR or single address.
func parseTrusted(s string) (netip.Prefix, error) {
	t := strings.TrimSpace(s)
	var p netip.Prefix
	var err error
	if strings.IndexByte(t, '/') >= 0 {
		p, err = netip.ParsePrefix(t)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(t)
		if err == nil {
			if a.Zone() != "" {
				err = errors.New("zones are not allowed")
			} else {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
	}
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("keyfunc: trusted proxy %q is not a CIDR prefix or address: %v", s, err)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

// Key returns the partition key of r's client: the IPv4 address, or the
// IPv6 prefix the address belongs to. For a canonical IPv4 address the key
// is a substring of the request's own strings, so it costs no allocation.
// The error wraps [core.ErrNoKey] (and [ErrMalformed]) when no client
// address can be determined.
func (k *IPKey) Key(r *core.Request) (string, error) {
	a, text, err := k.resolve(r)
	if err != nil {
		return "", err
	}
	return k.keyOf(a, text), nil
}

// ClientAddr returns r's client address, normalised (IPv4-mapped addresses
// unmapped, zones removed) and not grouped by prefix.
func (k *IPKey) ClientAddr(r *core.Request) (netip.Addr, error) {
	a, _, err := k.resolve(r)
	return a, err
}

// keyOf renders a's partition key. text, when not empty, is a's canonical
// IPv4 text taken from the request.
func (k *IPKey) keyOf(a netip.Addr, text string) string {
	if a.Is4() {
		if text != "" {
			return text
		}
		return a.String()
	}
	if v4, ok := k.embeddedIPv4(a); ok {
		return v4.String()
	}
	p := netip.PrefixFrom(a, k.v6bits).Masked()
	var buf [48]byte // "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128" is 43 bytes
	b := p.Addr().AppendTo(buf[:0])
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(k.v6bits), 10)
	return string(b)
}

func (k *IPKey) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolve returns the client address of r and, when it is an IPv4 address
// spelled canonically in the request, that spelling.
func (k *IPKey) resolve(r *core.Request) (netip.Addr, string, error) {
	host, ok := splitHost(r.RemoteAddr, false)
	if !ok {
		return netip.Addr{}, "", errBadPeer
	}
	peer, ptext, ok := normalize(host)
	if !ok {
		return netip.Addr{}, "", errBadPeer
	}
	if len(k.sources) == 0 || r.Header == nil || !k.isTrusted(peer) {
		return peer, ptext, nil
	}
	for _, src := range k.sources {
		lines := r.Header.Values(src.name)
		if len(lines) == 0 {
			continue
		}
		w := walk{k: k}
		var bad error
		switch src.kind {
		case srcForwarded:
			for i := len(lines) - 1; i >= 0 && !w.done; i-- {
				scanForwarded(lines[i], &w)
			}
			bad = errBadForwarded
		case srcXFF:
			for i := len(lines) - 1; i >= 0 && !w.done; i-- {
				scanXFF(lines[i], &w)
			}
			bad = errBadXFF
		default:
			scanSingle(lines[len(lines)-1], &w)
			bad = errBadSingle
		}
		if w.n == 0 {
			continue // only empty entries: as if absent
		}
		if w.bad {
			if k.onMalformed == MalformedUsePeer {
				return peer, ptext, nil
			}
			return netip.Addr{}, "", bad
		}
		return w.client, w.clientText, nil
	}
	return peer, ptext, nil
}

// walk finds the client in a chain of addresses fed to it from the right,
// the proxy nearest to this server first: the client is the first entry
// that is not a trusted proxy. An unparsable entry met before it makes the
// chain bad, since the proxy that appended it cannot be told from the
// client. When every entry is a trusted proxy, the client is the
// left-most. The walk is done at the first entry that is not a trusted
// proxy, so a chain costs the trusted hops at its right end, however long
// the part a client wrote.
type walk struct {
	k          *IPKey
	n          int  // entries fed
	done       bool // the client was found, or the chain is bad
	bad        bool
	client     netip.Addr // the client, or the left-most entry so far
	clientText string
}

// add feeds the next entry from the right: host is its address text when
// ok.
func (w *walk) add(host string, ok bool) {
	w.n++
	var a netip.Addr
	var text string
	if ok {
		a, text, ok = normalize(host)
	}
	if !ok {
		w.bad, w.done = true, true
		return
	}
	w.client, w.clientText = a, text
	w.done = !w.k.isTrusted(a)
}

// normalize parses an address, unmaps IPv4-mapped IPv6 and drops the zone.
// text is host itself when host is a canonical IPv4 address, else "".
func normalize(host string) (a netip.Addr, text string, ok bool) {
	if a, ok := canonicalIPv4(host); ok {
		return a, host, true
	}
	if !addrChars(host) {
		return netip.Addr{}, "", false // spares ParseAddr's error allocation
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	if a.Is4() {
		// netip accepts only the canonical dotted quad for IPv4.
		return a, host, true
	}
	if a.Is4In6() {
		return a.Unmap(), "", true
	}
	return a.WithZone(""), "", true
}

// canonicalIPv4 parses s when it is an IPv4 address in the canonical
// dotted-quad form netip accepts (four decimal fields of 0-255, no leading
// zeros); it is the common case, parsed without netip's general scan.
func canonicalIPv4(s string) (netip.Addr, bool) {
	var b [4]byte
	field, digits, v := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && v == 0 {
				return netip.Addr{}, false // a leading zero
			}
			v = v*10 + int(c-'0')
			if digits++; v > 255 {
				return netip.Addr{}, false
			}
		case c == '.' && digits > 0 && field < 3:
			b[field] = byte(v)
			field, digits, v = field+1, 0, 0
		default:
			return netip.Addr{}, false
		}
	}
	if field != 3 || digits == 0 {
		return netip.Addr{}, false
	}
	b[3] = byte(v)
	return netip.AddrFrom4(b), true
}

// addrChars reports whether s could be an IP address: hexadecimal digits,
// dots and colons, optionally followed by a zone.
func addrChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F', c == '.', c == ':':
		case c == '%':
			return true
		default:
			return false
		}
	}
	return true
}

// splitHost returns the address part of "addr", "addr:port", "[v6]" or
// "[v6]:port". A bracketed host must be IPv6. With obfPort, a port may also
// be an RFC 7239 obfuscated port ("_abc").
func splitHost(s string, obfPort bool) (string, bool) {
	if s == "" {
		return "", false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", false
		}
		host, rest := s[1:end], s[end+1:]
		if rest != "" && (rest[0] != ':' || !isPort(rest[1:], obfPort)) {
			return "", false
		}
		if strings.IndexByte(host, ':') < 0 { // "[192.0.2.1]" is not an IPv6 literal
			return "", false
		}
		return host, true
	}
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return s, true
	}
	if strings.IndexByte(s[i+1:], ':') >= 0 {
		return s, true // bare IPv6; a port needs brackets
	}
	if !isPort(s[i+1:], obfPort) {
		return "", false
	}
	return s[:i], true
}

// isPort reports whether s is a decimal port (at most 65535) or, with obf, an RFC 7239
// obfuscated port ("_" followed by ALPHA, DIGIT, ".", "_" or "-").
func isPort(s string, obf bool) bool {
	if s == "" {
		return false
	}
	if obf && s[0] == '_' {
		if len(s) == 1 {
			return false
		}
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isTchar reports whether c is an RFC 9110 token character.
func isTchar(c byte) bool {
	if isAlnum(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func trimOWS(s string) string {
	for s != "" && isOWS(s[0]) {
		s = s[1:]
	}
	for s != "" && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
