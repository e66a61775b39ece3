package keyfunc

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// header is one field line.
type header struct{ name, value string }

func h(name, value string) header { return header{name, value} }

func request(remote string, hdrs ...header) *core.Request {
	hh := http.Header{}
	for _, x := range hdrs {
		hh.Add(x.name, x.value)
	}
	return &core.Request{Method: "GET", Path: "/", RemoteAddr: remote, Header: hh}
}

func mustIP(t testing.TB, cfg IPConfig) *IPKey {
	t.Helper()
	k, err := NewIPKey(cfg)
	if err != nil {
		t.Fatalf("NewIPKey: %v", err)
	}
	return k
}

var (
	// trusted: a private proxy tier, an IPv6 proxy range and one single
	// address.
	trustedProxies = []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.254"}
	cfgXFF         = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{XForwardedFor}}
	cfgFwd         = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{Forwarded}}
	cfgCF          = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{ClientIPHeader("cf-connecting-ip")}}
	cfgRealIP      = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{XRealIP}}
	cfgAll         = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{ClientIPHeader("CF-Connecting-IP"), Forwarded, XForwardedFor, XRealIP}}
	cfgXFFPeer     = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{XForwardedFor}, OnMalformed: MalformedUsePeer}
	cfgFwdPeer     = IPConfig{TrustedProxies: trustedProxies, Headers: []Source{Forwarded}, OnMalformed: MalformedUsePeer}
)

const (
	client   = "198.51.100.9"
	attacker = "6.6.6.6"
	proxy1   = "10.0.0.1"
	proxy2   = "10.0.0.2"
)

type ipCase struct {
	name    string
	cfg     IPConfig
	remote  string
	hdrs    []header
	want    string // the key; "" when an error is expected
	wantErr error  // checked with errors.Is; core.ErrNoKey is always checked too
}

func runIPCases(t *testing.T, cases []ipCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := mustIP(t, c.cfg)
			got, err := k.Key(request(c.remote, c.hdrs...))
			if c.wantErr != nil {
				if err == nil {
					t.Fatalf("key %q, want error %v", got, c.wantErr)
				}
				if !errors.Is(err, c.wantErr) || !errors.Is(err, core.ErrNoKey) {
					t.Fatalf("error %v does not wrap %v and core.ErrNoKey", err, c.wantErr)
				}
				if got != "" {
					t.Fatalf("key %q returned with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != c.want {
				t.Fatalf("key %q, want %q", got, c.want)
			}
		})
	}
}

func TestIPSpoofing(t *testing.T) {
	runIPCases(t, []ipCase{
		// A client connecting directly is keyed by its own address,
		// whatever forwarding headers it sends.
		{name: "direct/no headers", cfg: cfgAll, remote: client + ":5555", want: client},
		{name: "direct/XFF", cfg: cfgXFF, remote: attacker + ":5555", hdrs: []header{h("X-Forwarded-For", client)}, want: attacker},
		{name: "direct/XFF claiming a trusted proxy", cfg: cfgXFF, remote: attacker + ":5555", hdrs: []header{h("X-Forwarded-For", proxy1)}, want: attacker},
		{name: "direct/every header", cfg: cfgAll, remote: attacker + ":1", hdrs: []header{
			h("X-Forwarded-For", client), h("Forwarded", "for="+client), h("X-Real-IP", client), h("CF-Connecting-IP", client),
		}, want: attacker},
		{name: "direct/garbage XFF", cfg: cfgXFF, remote: attacker + ":1", hdrs: []header{h("X-Forwarded-For", "garbage, \x00")}, want: attacker},
		{name: "no trusted proxies/headers ignored", cfg: IPConfig{}, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client)}, want: proxy1},
		// Chains through trusted proxies.
		{name: "one proxy", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client)}, want: client},
		{name: "one proxy/spoofed leftmost", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", attacker+", "+client)}, want: client},
		{name: "two proxies", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", client+", "+proxy1)}, want: client},
		{name: "two proxies/spoofed leftmost", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", attacker+", 1.2.3.4, "+client+", "+proxy1)}, want: client},
		{name: "two proxies/client claims a trusted hop", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", proxy1+", "+client+", "+proxy1)}, want: client},
		{name: "single trusted address", cfg: cfgXFF, remote: "192.0.2.254:80", hdrs: []header{h("X-Forwarded-For", client)}, want: client},
		{name: "neighbour of single trusted address", cfg: cfgXFF, remote: "192.0.2.253:80", hdrs: []header{h("X-Forwarded-For", client)}, want: "192.0.2.253"},
		{name: "IPv6 proxy", cfg: cfgXFF, remote: "[2001:db8:ffff::1]:443", hdrs: []header{h("X-Forwarded-For", client)}, want: client},
		{name: "every hop trusted/leftmost", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", "10.9.9.9, "+proxy1)}, want: "10.9.9.9"},
		// Many field lines of the same name are merged in order.
		{name: "lines/proxy line last", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", attacker), h("X-Forwarded-For", "7.7.7.7"), h("X-Forwarded-For", client)}, want: client},
		{name: "lines/proxy appended to last line", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", attacker+", 7.7.7.7"), h("X-Forwarded-For", "8.8.8.8, "+client)}, want: client},
		{name: "lines/two proxies", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", attacker), h("X-Forwarded-For", client), h("X-Forwarded-For", proxy1)}, want: client},
		// ::ffff: aliases: unmapped before the trust check and the key.
		{name: "alias/trusted hop as ::ffff:", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", client+", ::ffff:"+proxy1)}, want: client},
		{name: "alias/trusted hop as bracketed ::ffff: with port", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", client+", [::ffff:"+proxy1+"]:80")}, want: client},
		{name: "alias/peer as ::ffff:", cfg: cfgXFF, remote: "[::ffff:" + proxy1 + "]:80", hdrs: []header{h("X-Forwarded-For", client)}, want: client},
		{name: "alias/peer as ::ffff: untrusted", cfg: cfgXFF, remote: "[::ffff:" + attacker + "]:80", hdrs: []header{h("X-Forwarded-For", client)}, want: attacker},
		{name: "alias/client as ::ffff:", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "::ffff:"+client)}, want: client},
		{name: "alias/trusted hop with zone", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", client+", 2001:db8:ffff::5%eth0")}, want: client},
		// Obfuscated and garbage values.
		{name: "garbage/left of client ignored", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "not-an-ip, ☃, <script>, "+client)}, want: client},
		{name: "garbage/walked: reject", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", client+", garbage, "+proxy1)}, wantErr: ErrMalformed},
		{name: "garbage/walked: use peer", cfg: cfgXFFPeer, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", client+", garbage, "+proxy1)}, want: proxy2},
		{name: "garbage/unknown walked", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "unknown")}, wantErr: ErrMalformed},
		{name: "garbage/only trusted and garbage", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "garbage, "+proxy2)}, wantErr: ErrMalformed},
		{name: "garbage/bracketed IPv4", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "["+client+"]")}, wantErr: ErrMalformed},
		{name: "garbage/leading zeros", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "198.051.100.9")}, wantErr: ErrMalformed},
		{name: "garbage/port out of range", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client+":65536")}, wantErr: ErrMalformed},
		{name: "garbage/bad port", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client+":http")}, wantErr: ErrMalformed},
		{name: "garbage/hostname", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "localhost")}, wantErr: ErrMalformed},
		{name: "empty elements ignored", cfg: cfgXFF, remote: proxy2 + ":80", hdrs: []header{h("X-Forwarded-For", " ,"+client+",, ,"+proxy1+", ")}, want: client},
		{name: "empty header is absent", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", " , ")}, want: proxy1},
		// Ports and IPv6 in XFF.
		{name: "xff/IPv4 with port", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client+":4711")}, want: client},
		{name: "xff/IPv6", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "2001:db8:1:2:3:4:5:6")}, want: "2001:db8:1:2::/64"},
		{name: "xff/IPv6 bracketed with port", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "[2001:db8:1:2::99]:4711")}, want: "2001:db8:1:2::/64"},
		{name: "xff/IPv6 with zone", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "fe80::1:2%eth0")}, want: "fe80::/64"},
		{name: "xff/tabs", cfg: cfgXFF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", "\t"+client+"\t")}, want: client},
	})
}

func TestIPForwarded(t *testing.T) {
	runIPCases(t, []ipCase{
		{name: "plain", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for="+client)}, want: client},
		{name: "rfc example", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for=192.0.2.60;proto=http;by=203.0.113.43")}, want: "192.0.2.60"},
		{name: "quoted IPv6 with port", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="[2001:db8:cafe::17]:4711"`)}, want: "2001:db8:cafe::/64"},
		{name: "quoted IPv6 no port", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="[2001:db8:cafe::17]"`)}, want: "2001:db8:cafe::/64"},
		{name: "unquoted bracketed IPv6 (lenient)", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for=[2001:db8:cafe::17]:4711`)}, want: "2001:db8:cafe::/64"},
		{name: "quoted IPv4 with port", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="`+client+`:4711"`)}, want: client},
		{name: "obfuscated port", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="[2001:db8::1]:_p0rt"`)}, want: "2001:db8::/64"},
		{name: "case-insensitive name", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "FOR="+client+";Proto=https")}, want: client},
		{name: "for not first", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "proto=https; host=\"example.com\" ;for="+client)}, want: client},
		{name: "quoted-pair", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="198.51.100\.9"`)}, want: client},
		{name: "empty pairs", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", ";;for="+client+";;")}, want: client},
		{name: "two proxies", cfg: cfgFwd, remote: proxy2 + ":80", hdrs: []header{h("Forwarded", "for="+client+", for="+proxy1)}, want: client},
		{name: "spoofed leftmost", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for="+attacker+", for="+client)}, want: client},
		{name: "spoofed leftmost quoted comma", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="`+attacker+`, for=1.1.1.1";by=x, for=`+client)}, want: client},
		{name: "many lines", cfg: cfgFwd, remote: proxy2 + ":80", hdrs: []header{h("Forwarded", "for="+attacker), h("Forwarded", "for="+client), h("Forwarded", "for="+proxy1)}, want: client},
		{name: "unterminated quote on its own line", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="`+attacker), h("Forwarded", "for="+client)}, want: client},
		{name: "unterminated quote swallows same line", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="`+attacker+", for="+client)}, wantErr: ErrMalformed},
		{name: "trusted alias ::ffff:", cfg: cfgFwd, remote: proxy2 + ":80", hdrs: []header{h("Forwarded", `for=`+client+`, for="[::ffff:`+proxy1+`]"`)}, want: client},
		{name: "client alias ::ffff:", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="[::ffff:`+client+`]:80"`)}, want: client},
		{name: "garbage left of client", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `===, for=unknown, for=_x, ;;=;, "", for=`+client)}, want: client},
		{name: "unknown walked", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for=unknown")}, wantErr: ErrMalformed},
		{name: "unknown walked/use peer", cfg: cfgFwdPeer, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for=unknown")}, want: proxy1},
		{name: "obfuscated walked", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for=_hidden`)}, wantErr: ErrMalformed},
		{name: "obfuscated quoted with port walked", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="_hidden:_port"`)}, wantErr: ErrMalformed},
		{name: "no for walked", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for="+client+", proto=https")}, wantErr: ErrMalformed},
		{name: "duplicate for", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for="+client+";for="+attacker)}, wantErr: ErrMalformed},
		{name: "unbracketed IPv6", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", `for="2001:db8::1"`)}, wantErr: ErrMalformed},
		{name: "space around equals", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for = "+client)}, wantErr: ErrMalformed},
		{name: "control character in quotes", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", "for=\""+client+"\x01\"")}, wantErr: ErrMalformed},
		{name: "garbage walked/use peer", cfg: cfgFwdPeer, remote: proxy2 + ":80", hdrs: []header{h("Forwarded", "for="+client+", for=\"")}, want: proxy2},
		{name: "empty elements", cfg: cfgFwd, remote: proxy1 + ":80", hdrs: []header{h("Forwarded", ", ,for="+client+", ,")}, want: client},
		{name: "direct client ignored", cfg: cfgFwd, remote: attacker + ":80", hdrs: []header{h("Forwarded", "for="+client)}, want: attacker},
	})
}

func TestIPSingleHeaders(t *testing.T) {
	runIPCases(t, []ipCase{
		{name: "cf", cfg: cfgCF, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", client)}, want: client},
		{name: "cf/IPv6", cfg: cfgCF, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", "2001:db8:5:6::1")}, want: "2001:db8:5:6::/64"},
		{name: "cf/last line wins", cfg: cfgCF, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", attacker), h("CF-Connecting-IP", client)}, want: client},
		{name: "cf/list is malformed", cfg: cfgCF, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", attacker+", "+client)}, wantErr: ErrMalformed},
		{name: "cf/garbage", cfg: cfgCF, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", "x")}, wantErr: ErrMalformed},
		{name: "cf/direct", cfg: cfgCF, remote: attacker + ":80", hdrs: []header{h("CF-Connecting-IP", client)}, want: attacker},
		{name: "cf/absent", cfg: cfgCF, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client)}, want: proxy1},
		{name: "real-ip", cfg: cfgRealIP, remote: proxy1 + ":80", hdrs: []header{h("X-Real-IP", client)}, want: client},
		{name: "real-ip/mapped", cfg: cfgRealIP, remote: proxy1 + ":80", hdrs: []header{h("X-Real-IP", "::ffff:"+client)}, want: client},
		{name: "real-ip/garbage use peer", cfg: IPConfig{TrustedProxies: trustedProxies, Headers: []Source{XRealIP}, OnMalformed: MalformedUsePeer}, remote: proxy1 + ":80", hdrs: []header{h("X-Real-IP", "nope")}, want: proxy1},
		// Precedence: the first header present decides.
		{name: "precedence/cf first", cfg: cfgAll, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", attacker), h("Forwarded", "for=7.7.7.7"), h("CF-Connecting-IP", client)}, want: client},
		{name: "precedence/forwarded before xff", cfg: cfgAll, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", attacker), h("Forwarded", "for="+client)}, want: client},
		{name: "precedence/xff before real-ip", cfg: cfgAll, remote: proxy1 + ":80", hdrs: []header{h("X-Forwarded-For", client), h("X-Real-IP", attacker)}, want: client},
		{name: "precedence/empty first header skipped", cfg: cfgAll, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", " "), h("X-Forwarded-For", client)}, want: client},
		{name: "precedence/malformed first header decides", cfg: cfgAll, remote: proxy1 + ":80", hdrs: []header{h("CF-Connecting-IP", "x"), h("X-Forwarded-For", client)}, wantErr: ErrMalformed},
	})
}

func TestIPPeer(t *testing.T) {
	runIPCases(t, []ipCase{
		{name: "ipv4:port", remote: client + ":1234", want: client},
		{name: "bare ipv4", remote: client, want: client},
		{name: "ipv6 bracketed", remote: "[2001:db8:1:2:3::4]:443", want: "2001:db8:1:2::/64"},
		{name: "ipv6 bare", remote: "2001:db8:1:2:3::4", want: "2001:db8:1:2::/64"},
		{name: "ipv6 bracketed no port", remote: "[2001:db8:1:2:3::4]", want: "2001:db8:1:2::/64"},
		{name: "ipv6 zone", remote: "[fe80::1%eth0]:443", want: "fe80::/64"},
		{name: "mapped", remote: "[::ffff:" + client + "]:443", want: client},
		{name: "loopback6", remote: "[::1]:80", want: "::/64"},
		{name: "prefix 48", cfg: IPConfig{IPv6Prefix: 48}, remote: "[2001:db8:1:2:3::4]:443", want: "2001:db8:1::/48"},
		{name: "prefix 128", cfg: IPConfig{IPv6Prefix: 128}, remote: "[2001:db8:1:2:3::4]:443", want: "2001:db8:1:2:3::4/128"},
		{name: "prefix 32", cfg: IPConfig{IPv6Prefix: 32}, remote: "[2001:db8:1:2:3::4]:443", want: "2001:db8::/32"},
		{name: "empty", remote: "", wantErr: ErrMalformed},
		{name: "unix socket", remote: "@", wantErr: ErrMalformed},
		{name: "hostname", remote: "localhost:80", wantErr: ErrMalformed},
		{name: "unclosed bracket", remote: "[2001:db8::1:80", wantErr: ErrMalformed},
		{name: "bad port", remote: client + ":", wantErr: ErrMalformed},
		{name: "bracketed ipv4", remote: "[" + client + "]:80", wantErr: ErrMalformed},
		{name: "trailing junk", remote: "[2001:db8::1]x", wantErr: ErrMalformed},
		{name: "bad peer is never replaced by a header", cfg: cfgXFFPeer, remote: "junk", hdrs: []header{h("X-Forwarded-For", client)}, wantErr: ErrMalformed},
	})
}

// TestIPRotatingLeftmost sends many requests whose left-most
// X-Forwarded-For entries change on every request, as a client rotating
// spoofed addresses would: all of them must spend one budget.
func TestIPRotatingLeftmost(t *testing.T) {
	k := mustIP(t, cfgXFF)
	fwd := mustIP(t, cfgFwd)
	keys := map[string]int{}
	for i := range 1000 {
		spoof := fmt.Sprintf("%d.%d.%d.%d", 1+i%223, i/7%256, i/3%256, i%256)
		r := request(proxy2+":80", h("X-Forwarded-For", spoof+", "+client+", "+proxy1))
		k1, err := k.Key(r)
		if err != nil {
			t.Fatal(err)
		}
		keys[k1]++
		r = request(proxy1+":80", h("Forwarded", "for="+spoof), h("Forwarded", "for="+client))
		k2, err := fwd.Key(r)
		if err != nil {
			t.Fatal(err)
		}
		keys[k2]++
	}
	if len(keys) != 1 || keys[client] != 2000 {
		t.Fatalf("rotating leftmost entries produced keys %v, want only %q", keys, client)
	}
}

// TestIPEngine checks, through a real engine, that a client rotating its
// spoofed X-Forwarded-For cannot get past its budget, and that two clients
// behind the same proxy get one budget each.
func TestIPEngine(t *testing.T) {
	ipKey, err := IP(cfgXFF)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.MustNew(memstore.Config{})
	eng, err := core.New(core.Config{Store: store, Budgets: []core.Budget{{
		Name: "per_ip", Quota: 3, Window: 60e9, Key: ipKey, KeyClass: "ip",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := eng.Layer(core.Use("per_ip"))
	if err != nil {
		t.Fatal(err)
	}
	decide := func(r *core.Request) bool {
		var d core.Decision
		l.Decide(r, &d)
		return d.Allowed
	}
	allowed := 0
	for i := range 20 {
		r := request(proxy1+":80", h("X-Forwarded-For", fmt.Sprintf("1.1.1.%d, %s", i, client)))
		if decide(r) {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("a client rotating spoofed entries got %d requests through a quota of 3", allowed)
	}
	if !decide(request(proxy1+":80", h("X-Forwarded-For", "203.0.113.50"))) {
		t.Fatal("a second client behind the same proxy was denied: it shares the first client's budget")
	}
}

func TestIPClientAddr(t *testing.T) {
	k := mustIP(t, cfgXFF)
	a, err := k.ClientAddr(request(proxy1+":80", h("X-Forwarded-For", "[2001:db8:1:2:3:4:5:6%eth0]:80")))
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddr("2001:db8:1:2:3:4:5:6"); a != want {
		t.Fatalf("ClientAddr %v, want %v (unmasked, zone dropped)", a, want)
	}
	a, err = k.ClientAddr(request("[::ffff:" + client + "]:80"))
	if err != nil || a != netip.MustParseAddr(client) {
		t.Fatalf("ClientAddr %v, %v; want %s unmapped", a, err, client)
	}
	if _, err := k.ClientAddr(request("x")); !errors.Is(err, core.ErrNoKey) {
		t.Fatalf("ClientAddr of a bad peer: %v", err)
	}
}

func TestIPNilHeader(t *testing.T) {
	k := mustIP(t, cfgXFF)
	got, err := k.Key(&core.Request{RemoteAddr: proxy1 + ":80"})
	if err != nil || got != proxy1 {
		t.Fatalf("nil Header: %q, %v", got, err)
	}
}

func TestPeerIP(t *testing.T) {
	kf := PeerIP()
	got, err := kf(request(proxy1+":80", h("X-Forwarded-For", client)))
	if err != nil || got != proxy1 {
		t.Fatalf("PeerIP: %q, %v; want %s", got, err, proxy1)
	}
	got, err = kf(request("[2001:db8::1]:80"))
	if err != nil || got != "2001:db8::/64" {
		t.Fatalf("PeerIP IPv6: %q, %v", got, err)
	}
}

func TestNewIPErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  IPConfig
		want []string // substrings of the error
	}{
		{"invalid CIDR", IPConfig{TrustedProxies: []string{"10.0.0.0/33"}, Headers: []Source{XForwardedFor}}, []string{`"10.0.0.0/33"`}},
		{"not an address", IPConfig{TrustedProxies: []string{"proxy.internal"}, Headers: []Source{XForwardedFor}}, []string{`"proxy.internal"`}},
		{"zone", IPConfig{TrustedProxies: []string{"fe80::1%eth0"}, Headers: []Source{XForwardedFor}}, []string{"zone"}},
		{"two bad CIDRs", IPConfig{TrustedProxies: []string{"x", "10.0.0.1/8/8"}, Headers: []Source{XForwardedFor}}, []string{`"x"`, `"10.0.0.1/8/8"`}},
		{"prefix too short", IPConfig{IPv6Prefix: 31}, []string{"/31"}},
		{"prefix too long", IPConfig{IPv6Prefix: 129}, []string{"/129"}},
		{"negative prefix", IPConfig{IPv6Prefix: -1}, []string{"/-1"}},
		{"headers without trust", IPConfig{Headers: []Source{XForwardedFor}}, []string{"TrustedProxies"}},
		{"trust without headers", IPConfig{TrustedProxies: []string{"10.0.0.0/8"}}, []string{"Headers"}},
		{"zero source", IPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Headers: []Source{{}}}, []string{"zero Source"}},
		{"bad header name", IPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Headers: []Source{ClientIPHeader("Bad Header")}}, []string{"not a valid header"}},
		{"empty header name", IPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Headers: []Source{ClientIPHeader("")}}, []string{"not a valid header"}},
		{"list as single", IPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Headers: []Source{ClientIPHeader("x-forwarded-for")}}, []string{"XForwardedFor"}},
		{"duplicate", IPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Headers: []Source{XRealIP, ClientIPHeader("x-real-ip")}}, []string{"twice"}},
		{"bad malformed policy", IPConfig{OnMalformed: 7}, []string{"policy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := NewIPKey(c.cfg)
			if err == nil {
				t.Fatalf("NewIPKey accepted %+v", c.cfg)
			}
			if k != nil {
				t.Fatal("NewIPKey returned a key with an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, err := IP(c.cfg); err == nil {
				t.Fatal("IP accepted what NewIPKey refused")
			}
		})
	}
}

func TestParseTrusted(t *testing.T) {
	cases := map[string]string{
		"10.0.0.0/8":          "10.0.0.0/8",
		"10.1.2.3/8":          "10.0.0.0/8",
		" 192.0.2.1 ":         "192.0.2.1/32",
		"2001:db8::1":         "2001:db8::1/128",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"::ffff:10.0.0.1":     "10.0.0.1/32",
		"2001:db8::/32":       "2001:db8::/32",
	}
	for in, want := range cases {
		p, err := parseTrusted(in)
		if err != nil || p.String() != want {
			t.Errorf("parseTrusted(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	// A mapped trusted prefix protects the IPv4 proxy after unmapping.
	k := mustIP(t, IPConfig{TrustedProxies: []string{"::ffff:10.0.0.0/104"}, Headers: []Source{XForwardedFor}})
	got, err := k.Key(request(proxy1+":80", h("X-Forwarded-For", client)))
	if err != nil || got != client {
		t.Fatalf("mapped trusted prefix: %q, %v", got, err)
	}
}

func TestMalformedString(t *testing.T) {
	if MalformedReject.String() != "reject" || MalformedUsePeer.String() != "use_peer" || Malformed(9).String() != "Malformed(9)" {
		t.Fatal("Malformed.String")
	}
	if XForwardedFor.Name() != "X-Forwarded-For" || ClientIPHeader("cf-connecting-ip").String() != "Cf-Connecting-Ip" {
		t.Fatal("Source names")
	}
}

// TestIPAllocs pins the allocation contract of the hot paths.
func TestIPAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts are checked without -short and -race")
	}
	peer := PeerIP()
	xff := mustIP(t, cfgXFF)
	fwd := mustIP(t, cfgFwd)
	cases := []struct {
		name string
		kf   core.KeyFunc
		r    *core.Request
		max  float64
	}{
		{"ipv4 peer", peer, request(client + ":5555"), 0},
		{"ipv4 peer with ignored headers", xff.Key, request(client+":5555", h("X-Forwarded-For", attacker)), 0},
		{"ipv6 peer", peer, request("[2001:db8::1]:5555"), 1},
		{"xff ipv4 client", xff.Key, request(proxy2+":80", h("X-Forwarded-For", attacker+", "+client+", "+proxy1)), 0},
		{"forwarded ipv4 client", fwd.Key, request(proxy2+":80", h("Forwarded", `for="`+client+`:80";proto=https, for=`+proxy1)), 0},
		{"forwarded ipv6 client", fwd.Key, request(proxy1+":80", h("Forwarded", `for="[2001:db8:cafe::17]:4711"`)), 1},
		{"malformed", xff.Key, request(proxy1+":80", h("X-Forwarded-For", "junk")), 0},
	}
	for _, c := range cases {
		n := testing.AllocsPerRun(200, func() { _, _ = c.kf(c.r) })
		if n > c.max {
			t.Errorf("%s: %.1f allocs per key, want at most %.0f", c.name, n, c.max)
		}
	}
}

// TestLongChainParsesTrustedHopsOnly: a chain of 10,000 entries a client
// wrote, then the client and one trusted proxy. The walk parses the
// proxy and the client, nothing a client wrote before itself, and finds
// the same client as for the short chain.
func TestLongChainParsesTrustedHopsOnly(t *testing.T) {
	for _, tc := range []struct {
		src    Source
		cfg    IPConfig
		header string
	}{
		{XForwardedFor, cfgXFF, longChain(10000, "9.9.9.9", client, proxy1)},
		{XForwardedFor, cfgXFF, longChain(10000, "garbage", client, proxy1)},
		{Forwarded, cfgFwd, longChain(10000, "for=9.9.9.9", "for="+client, "for="+proxy1)},
		{Forwarded, cfgFwd, longChain(10000, `for="[2001:db8::1]:80";proto=https`, `for="`+client+`:4711"`, "for="+proxy1)},
	} {
		k := mustIP(t, tc.cfg)
		if n := EntriesParsed(k, tc.src, tc.header); n != 2 {
			t.Errorf("%s: %d entries parsed, want 2 (the trusted proxy and the client)", tc.src, n)
		}
		got, err := k.Key(request(proxy2+":80", h(tc.src.Name(), tc.header)))
		if err != nil || got != client {
			t.Errorf("%s: key %q, %v; want %s", tc.src, got, err, client)
		}
	}
}
