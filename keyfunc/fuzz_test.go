package keyfunc

import (
	"errors"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
)

// The fuzz targets compare every header parser with a reference written
// the slow, obvious way (split, trim, net/netip), and check the spoofing
// invariant: whatever a client sends, an entry a trusted proxy appends
// decides the key.

// outcome is what a key function did: the key, or the error class.
type outcome struct {
	key       string
	malformed bool
	noKey     bool
}

func outcomeOf(key string, err error) outcome {
	if err != nil {
		return outcome{malformed: errors.Is(err, ErrMalformed) || errors.Is(err, ErrBadCredential), noKey: errors.Is(err, core.ErrNoKey)}
	}
	return outcome{key: key}
}

// refEntry parses one address entry the obvious way: a bare address, an
// address with a port, or a bracketed IPv6 address with or without port.
func refEntry(s string) (netip.Addr, bool) {
	// netip accepts any zone text, brackets included: "[::%]]" would be
	// "::" with zone "]". A bracketed host ends at its first "]".
	if strings.HasPrefix(s, "[") && strings.Count(s, "]") > 1 {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return refNorm(a), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return refNorm(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && len(s[strings.LastIndexByte(s, ':')+1:]) <= 5 {
		return refNorm(ap.Addr()), true
	}
	return netip.Addr{}, false
}

func refNorm(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

func refKey(a netip.Addr, v6bits int) string {
	if a.Is4() {
		return a.String()
	}
	// An IPv6 address that carries an IPv4 client keys by it: NAT64's
	// well-known prefix (the last 32 bits), Teredo (the last 32 bits
	// inverted), 6to4 (bits 16 to 47).
	b := a.As16()
	switch {
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && [8]byte(b[4:12]) == [8]byte{}:
		return netip.AddrFrom4([4]byte(b[12:])).String()
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0:
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}).String()
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte(b[2:6])).String()
	}
	return netip.PrefixFrom(a, v6bits).Masked().String()
}

// refWalk is STANDARDS §3.2 step 2-4, from the right.
func refWalk(entries []netip.Addr, ok []bool, trusted func(netip.Addr) bool) (netip.Addr, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if !ok[i] {
			return netip.Addr{}, false
		}
		if !trusted(entries[i]) {
			return entries[i], true
		}
	}
	return entries[0], true
}

// refXFF resolves a trusted peer's X-Forwarded-For lines.
func refXFF(lines []string, peer string, trusted func(netip.Addr) bool) outcome {
	all := strings.Split(strings.Join(lines, ","), ",")
	var entries []netip.Addr
	var oks []bool
	for _, e := range all {
		e = strings.Trim(e, " \t")
		if e == "" {
			continue
		}
		a, ok := refEntry(e)
		entries, oks = append(entries, a), append(oks, ok)
	}
	if len(entries) == 0 {
		return outcome{key: peer}
	}
	a, ok := refWalk(entries, oks, trusted)
	if !ok {
		return outcome{malformed: true, noKey: true}
	}
	return outcome{key: refKey(a, 64)}
}

func FuzzXForwardedFor(f *testing.F) {
	for _, s := range [][2]string{
		{"198.51.100.9", ""},
		{"6.6.6.6, 198.51.100.9", "10.0.0.1"},
		{"garbage, 198.51.100.9", " , ,"},
		{"198.51.100.9, ::ffff:10.0.0.1", "[::ffff:10.0.0.2]:80"},
		{"[2001:db8::1]:4711", "fe80::1%eth0"},
		{"unknown", "198.51.100.9:65536"},
		{"\t198.51.100.9\t,", "1.2.3.4:80:90"},
		{"[1.2.3.4]", "[2001:db8::1"},
	} {
		f.Add(s[0], s[1])
	}
	k := mustIP(f, cfgXFF)
	f.Fuzz(func(t *testing.T, l1, l2 string) {
		trusted := k.isTrusted
		lines := []string{l1, l2}
		got := outcomeOf(k.Key(request(proxy1+":80", h("X-Forwarded-For", l1), h("X-Forwarded-For", l2))))
		if want := refXFF(lines, proxy1, trusted); got != want {
			t.Fatalf("lines %q: got %+v, reference %+v", lines, got, want)
		}
		// Spoofing: the proxy appends the address it saw, on the same
		// line or a line of its own. Nothing the client sent matters.
		same := outcomeOf(k.Key(request(proxy1+":80", h("X-Forwarded-For", l1), h("X-Forwarded-For", l2+", "+client))))
		own := outcomeOf(k.Key(request(proxy1+":80", h("X-Forwarded-For", l1), h("X-Forwarded-For", l2), h("X-Forwarded-For", client))))
		if same.key != client || own.key != client {
			t.Fatalf("client lines %q: keys %+v and %+v, want %s", lines, same, own, client)
		}
		// And a direct client is its own key.
		if d := outcomeOf(k.Key(request(attacker+":1", h("X-Forwarded-For", l1)))); d.key != attacker {
			t.Fatalf("direct client sending %q: %+v", l1, d)
		}
	})
}

// refSplit splits s at sep bytes outside quoted strings (with quoted-pair
// escapes), keeping an unterminated quoted string to the end of s.
func refSplit(s string, sep byte) []string {
	var out []string
	start, inQuote := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case inQuote && s[i] == '\\':
			i++
		case s[i] == '"':
			inQuote = !inQuote
		case !inQuote && s[i] == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func refQuoted(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	in := v[1 : len(v)-1]
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c == '"' {
			return "", false
		}
		if c == '\\' {
			i++
			if i == len(in) {
				return "", false
			}
			c = in[i]
		}
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// refNode parses a Forwarded node the obvious way.
func refNode(v string) (netip.Addr, bool) {
	if v == "" || v[0] == '_' || strings.EqualFold(v, "unknown") {
		return netip.Addr{}, false
	}
	host, port := v, ""
	if v[0] == '[' {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = v[1:end], v[end+1:]
		if port != "" {
			if port[0] != ':' {
				return netip.Addr{}, false
			}
			port = port[1:]
		} else {
			port = "0"
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
	} else if h, p, found := strings.Cut(v, ":"); found {
		host, port = h, p
	} else {
		port = "0"
	}
	if strings.HasPrefix(port, "_") {
		if len(port) == 1 || strings.IndexFunc(port[1:], func(r rune) bool {
			return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '_' || r == '-')
		}) >= 0 {
			return netip.Addr{}, false
		}
		port = "0"
	}
	if len(port) > 5 {
		return netip.Addr{}, false
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil || strings.HasPrefix(port, "+") {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (v[0] != '[' && !a.Is4()) {
		return netip.Addr{}, false
	}
	return refNorm(a), true
}

// refForwardedElement returns the element's for= address and whether the
// element is well formed with exactly one for=.
func refForwardedElement(el string) (netip.Addr, bool) {
	var node string
	found := false
	for _, pair := range refSplit(el, ';') {
		pair = strings.Trim(pair, " \t")
		if pair == "" {
			continue
		}
		name, val, ok := strings.Cut(pair, "=")
		if !ok || name == "" || !validFieldName(name) || val == "" {
			return netip.Addr{}, false
		}
		if val[0] == '"' {
			if val, ok = refQuoted(val); !ok {
				return netip.Addr{}, false
			}
		} else if strings.ContainsAny(val, " \t\"") {
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			node, found = val, true
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	return refNode(node)
}

func refForwarded(lines []string, peer string, trusted func(netip.Addr) bool) outcome {
	var entries []netip.Addr
	var oks []bool
	for _, l := range lines {
		for _, el := range refSplit(l, ',') {
			if strings.Trim(el, " \t") == "" {
				continue
			}
			a, ok := refForwardedElement(el)
			entries, oks = append(entries, a), append(oks, ok)
		}
	}
	if len(entries) == 0 {
		return outcome{key: peer}
	}
	a, ok := refWalk(entries, oks, trusted)
	if !ok {
		return outcome{malformed: true, noKey: true}
	}
	return outcome{key: refKey(a, 64)}
}

func FuzzForwarded(f *testing.F) {
	for _, s := range [][2]string{
		{"for=198.51.100.9", ""},
		{`for="[2001:db8:cafe::17]:4711"`, "for=10.0.0.1"},
		{"for=192.0.2.60;proto=http;by=203.0.113.43", `For="_hidden:_port"`},
		{`for="6.6.6.6`, "for=198.51.100.9"},
		{`for="198.51.100\.9";;`, `for=unknown, proto=https`},
		{`for="[::ffff:10.0.0.1]", for=1.2.3.4:80`, `===, "", ;;=;`},
		{`for=[2001:db8::1]:_p0rt;by="a,b"`, "for = 1.2.3.4"},
		{"fo\"r=1,2\"=3", "for=\"1.2.3.4\x01\""},
	} {
		f.Add(s[0], s[1])
	}
	k := mustIP(f, cfgFwd)
	f.Fuzz(func(t *testing.T, l1, l2 string) {
		trusted := k.isTrusted
		lines := []string{l1, l2}
		got := outcomeOf(k.Key(request(proxy1+":80", h("Forwarded", l1), h("Forwarded", l2))))
		if want := refForwarded(lines, proxy1, trusted); got != want {
			t.Fatalf("lines %q: got %+v, reference %+v", lines, got, want)
		}
		// A proxy that appends its element on a line of its own decides
		// the key, whatever the client sent before it.
		own := outcomeOf(k.Key(request(proxy1+":80", h("Forwarded", l1), h("Forwarded", l2), h("Forwarded", "for="+client))))
		if own.key != client {
			t.Fatalf("client lines %q, proxy line for=%s: %+v", lines, client, own)
		}
		// Appended to the client's line, a client can break the line
		// (an unterminated quote) but never choose another address.
		same := outcomeOf(k.Key(request(proxy1+":80", h("Forwarded", l1), h("Forwarded", l2+", for="+client))))
		if same.key != client && !same.malformed {
			t.Fatalf("client lines %q with for=%s appended: %+v", lines, client, same)
		}
		if d := outcomeOf(k.Key(request(attacker+":1", h("Forwarded", l1)))); d.key != attacker {
			t.Fatalf("direct client sending %q: %+v", l1, d)
		}
	})
}

func FuzzClientIPHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"198.51.100.9", ""},
		{"6.6.6.6", "198.51.100.9"},
		{"1.1.1.1, 2.2.2.2", " "},
		{"x", "::ffff:198.51.100.9"},
		{"[2001:db8::1]:443", "2001:db8::1%eth0"},
	} {
		f.Add(s[0], s[1])
	}
	k := mustIP(f, cfgCF)
	f.Fuzz(func(t *testing.T, l1, l2 string) {
		got := outcomeOf(k.Key(request(proxy1+":80", h("CF-Connecting-IP", l1), h("CF-Connecting-IP", l2))))
		var want outcome
		switch v := strings.Trim(l2, " \t"); {
		case v == "":
			want = outcome{key: proxy1}
		case strings.Contains(v, ","):
			want = outcome{malformed: true, noKey: true}
		default:
			if a, ok := refEntry(v); ok {
				want = outcome{key: refKey(a, 64)}
			} else {
				want = outcome{malformed: true, noKey: true}
			}
		}
		if got != want {
			t.Fatalf("lines %q, %q: got %+v, reference %+v", l1, l2, got, want)
		}
	})
}

func FuzzRemoteAddr(f *testing.F) {
	for _, s := range []string{
		"198.51.100.9:5555", "198.51.100.9", "[2001:db8::1]:443", "2001:db8::1", "[2001:db8::1]",
		"[fe80::1%eth0]:1", "[::ffff:1.2.3.4]:80", "@", "", "[1.2.3.4]:80", "1.2.3.4:", "1.2.3.4:99999",
	} {
		f.Add(s)
	}
	peer := PeerIP()
	f.Fuzz(func(t *testing.T, s string) {
		key, err := peer(&core.Request{RemoteAddr: s})
		got := outcomeOf(key, err)
		want := outcome{malformed: true, noKey: true}
		if a, ok := refEntry(s); ok {
			want = outcome{key: refKey(a, 64)}
		}
		if got != want {
			t.Fatalf("RemoteAddr %q: got %+v, reference %+v", s, got, want)
		}
	})
}

func FuzzAuthorization(f *testing.F) {
	for _, s := range []string{
		"Bearer abc", "bearer  abc ", "Bearer", "Bearer\tabc", "Bearerabc", "Basic abc", "Bearer a b c",
		"Bearer \x01", "AccessKey k", "  Bearer x", "Bearer " + strings.Repeat("k", MaxAPIKeyLen+1),
	} {
		f.Add(s)
	}
	hs := mustHasher(f, HashConfig{Secret: testSecret})
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Scheme: "Bearer"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := outcomeOf(kf(request("", h("Authorization", v))))
		want := outcome{noKey: true}
		if rest, ok := cutPrefixFold(strings.Trim(v, " \t"), "Bearer"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			cred := strings.Trim(rest, " \t")
			switch {
			case cred == "" || len(cred) > MaxAPIKeyLen || strings.IndexFunc(cred, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
				want = outcome{malformed: true}
			default:
				want = outcome{key: hs.Sum(cred)}
			}
		}
		if got != want {
			t.Fatalf("Authorization %q: got %+v, reference %+v", v, got, want)
		}
	})
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"api_key=abc", "a=1&api_key=abc&b=2", "api%5Fkey=a%2Bb+c", "api_key=a&api_key=b", "api_key=%zz",
		"api_key=a;b", "api_key", "&&api_key=&", "API_KEY=x", "api_key=%00",
	} {
		f.Add(s)
	}
	hs := mustHasher(f, HashConfig{Secret: testSecret})
	kf, err := APIKey(APIKeyConfig{Hasher: hs, Query: "api_key", RawQuery: func(r *core.Request) string { return r.Path }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := outcomeOf(kf(&core.Request{Path: q}))
		vals, _ := url.ParseQuery(q) // the reference: what net/http's URL.Query() sees
		want := outcome{noKey: true}
		switch vs := vals["api_key"]; {
		case len(vs) > 1:
			want = outcome{malformed: true}
		case len(vs) == 1:
			if checkCredential(vs[0]) != nil {
				want = outcome{malformed: true}
			} else {
				want = outcome{key: hs.Sum(vs[0])}
			}
		}
		if got != want {
			t.Fatalf("query %q: got %+v, reference %+v", q, got, want)
		}
	})
}

// FuzzHeader: a Header key is the header's one value, at most MaxValueLen
// bytes; no value at all is a missing key; two lines or an over-long
// value is a garbled key (core.ErrBadKey), never a key and never merely
// missing; and no error ever holds the value.
func FuzzHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"acme", ""}, {"", ""}, {"a", "b"}, {strings.Repeat("x", MaxValueLen+1), ""}, {strings.Repeat("y", MaxValueLen), ""},
	} {
		f.Add(s[0], s[1], s[1] != "")
	}
	kf := Header("tenant", "X-Tenant")
	f.Fuzz(func(t *testing.T, v1, v2 string, two bool) {
		hdrs := []header{h("X-Tenant", v1)}
		if two {
			hdrs = append(hdrs, h("X-Tenant", v2))
		}
		key, err := kf(request("192.0.2.1:1", hdrs...))
		switch {
		case two:
			if err == nil || !errors.Is(err, core.ErrBadKey) {
				t.Fatalf("two lines %q, %q: key %q, err %v; want a garbled key", v1, v2, key, err)
			}
		case v1 == "":
			if err == nil || errors.Is(err, core.ErrBadKey) || !errors.Is(err, core.ErrNoKey) {
				t.Fatalf("an empty value: key %q, err %v; want a missing key", key, err)
			}
		case len(v1) > MaxValueLen:
			if err == nil || !errors.Is(err, core.ErrBadKey) {
				t.Fatalf("%d bytes: key %q, err %v; want a garbled key", len(v1), key, err)
			}
		default:
			if err != nil || key != v1 {
				t.Fatalf("%q: key %q, err %v; want the value", v1, key, err)
			}
		}
		if err != nil && len(v1) >= 8 && strings.Contains(err.Error(), v1) {
			t.Fatalf("error %q holds the value", err)
		}
	})
}
