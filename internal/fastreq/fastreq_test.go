package fastreq

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// FuzzAppendAddr checks that AppendAddr writes exactly what net/http would
// write for the same connection address (net.TCPAddr.String), for any IP
// bytes, port and zone.
func FuzzAppendAddr(f *testing.F) {
	f.Add([]byte{127, 0, 0, 1}, 41000, "")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 203, 0, 113, 9}, 80, "")
	f.Add([]byte(net.ParseIP("::1").To16()), 65535, "")
	f.Add([]byte(net.ParseIP("fe80::1").To16()), 8080, "eth0")
	f.Add([]byte{10, 0, 0, 1}, 1, "zone")
	f.Add([]byte{}, 0, "")
	f.Add([]byte{1, 2, 3}, 5, "")
	f.Fuzz(func(t *testing.T, ip []byte, port int, zone string) {
		a := &net.TCPAddr{IP: net.IP(ip), Port: port, Zone: zone}
		if got, want := string(AppendAddr(nil, a)), a.String(); got != want {
			t.Fatalf("AppendAddr(%#v) = %q, want %q", a, got, want)
		}
	})
}

func TestOwned(t *testing.T) {
	a := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5000}
	long := []byte(strings.Repeat("a", ShortTail+1))
	for _, c := range []struct{ path, query []byte }{
		{[]byte("/x"), []byte("a=1")},
		{[]byte("/"), nil},
		{long, []byte("q")},
	} {
		r, p, q := new(Conn).Owned(a, c.path, c.query)
		if r != "192.0.2.7:5000" || p != string(c.path) || q != string(c.query) {
			t.Errorf("Owned(%q, %q) = %q, %q, %q", c.path, c.query, r, p, q)
		}
	}
	// A pooled Conn keeps the latest address's text: a request from
	// another connection must not read it.
	var conn Conn
	for _, a := range []*net.TCPAddr{a, {IP: net.IPv4(198, 51, 100, 1), Port: 6000}, a} {
		if r, _, _ := conn.Owned(a, nil, nil); r != a.String() {
			t.Errorf("Owned from %v after another address = %q", a, r)
		}
	}
	// The path and query are copies: rewriting the request's buffer does
	// not change them.
	buf := []byte("/p?q")
	_, p, q := conn.Owned(a, buf[:2], buf[3:])
	copy(buf, "/z?z")
	if p != "/p" || q != "q" {
		t.Errorf("after the buffer was reused: path %q, query %q", p, q)
	}
}

// TestCopies checks that Method, Header and Local return strings that do
// not alias the request's buffers.
func TestCopies(t *testing.T) {
	custom := []byte("PURGE")
	m := Method(custom)
	copy(custom, "XXXXX")
	if m != "PURGE" || Method([]byte("GET")) != http.MethodGet {
		t.Errorf("Method: %q after its buffer was reused", m)
	}

	var req fasthttp.Request
	req.Header.Add("X-K", "one")
	req.Header.Add("X-K", "two")
	h := (*Header)(&req.Header)
	get, vals := h.Get("X-K"), h.Values("X-K")
	req.Header.Del("X-K")
	req.Header.Add("X-K", "ZZZ")
	req.Header.Add("X-K", "YYY")
	if get != "one" || len(vals) != 2 || vals[0] != "one" || vals[1] != "two" {
		t.Errorf("Header: Get %q, Values %q after the header changed", get, vals)
	}
	if h.Values("X-None") != nil || h.Get("X-None") != "" {
		t.Error("Header: a missing field has values")
	}

	var fc fasthttp.RequestCtx
	b := []byte("tenant-1")
	fc.SetUserValue("t", unsafe.String(&b[0], len(b)))
	fc.SetUserValue("n", 7)
	got := Local(&fc, "t")
	copy(b, "XXXXXXXX")
	if got != "tenant-1" || Local(&fc, "n") != 7 || Local(&fc, "none") != nil {
		t.Errorf("Local: %v after the string's buffer was reused", got)
	}
}

func TestSetFields(t *testing.T) {
	var h fasthttp.ResponseHeader
	h.Set("Retry-After", "99")
	SetFields(&h, http.Header{"Retry-After": {"3"}, "Vary": {"a", "b"}})
	if got := string(h.Peek("Retry-After")); got != "3" {
		t.Errorf("Retry-After %q, want the denial's 3", got)
	}
	if vs := h.PeekAll("Vary"); len(vs) != 2 {
		t.Errorf("Vary has %d values, want 2", len(vs))
	}
	buf := SetHeader(&h, nil, "RateLimit", `"b";r=1;t=2`)
	copy(buf, strings.Repeat("x", len(buf)))
	// SetCanonical keeps the name as given (Peek would normalize it).
	if got := h.String(); !strings.Contains(got, "\r\nRateLimit: \"b\";r=1;t=2\r\n") {
		t.Errorf("SetHeader: header %q after its buffer was reused", got)
	}
}
