package fibermw

import (
	"net"
	"testing"
)

// FuzzAppendAddr checks that RemoteAddr reads exactly as net/http would
// write the same connection address (net.TCPAddr.String), for any IP bytes,
// port and zone.
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
		if got, want := string(appendAddr(nil, a)), a.String(); got != want {
			t.Fatalf("appendAddr(%#v) = %q, want %q", a, got, want)
		}
	})
}

func TestOwned(t *testing.T) {
	a := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5000}
	long := make([]byte, shortTail+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, c := range []struct{ path, query []byte }{
		{[]byte("/x"), []byte("a=1")},
		{[]byte("/"), nil},
		{long, []byte("q")},
	} {
		r, p, q := new(requestState).owned(a, c.path, c.query)
		if r != "192.0.2.7:5000" || p != string(c.path) || q != string(c.query) {
			t.Errorf("owned(%q, %q) = %q, %q, %q", c.path, c.query, r, p, q)
		}
	}
	// A pooled state keeps the latest address's text: a request from
	// another connection must not read it.
	st := new(requestState)
	for _, a := range []*net.TCPAddr{a, {IP: net.IPv4(198, 51, 100, 1), Port: 6000}, a} {
		if r, _, _ := st.owned(a, nil, nil); r != a.String() {
			t.Errorf("owned from %v after another address = %q", a, r)
		}
	}
}
