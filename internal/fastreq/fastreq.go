// Package fastreq reads a fasthttp request for the Fiber adapters (fibermw
// for Fiber v2, fibermw/fiberv3 for Fiber v3) without borrowing: fasthttp
// reuses a connection's request buffers for its next request, so every
// string this package returns is a constant or a copy that a store may
// keep as a key.
//
// It also keeps the per-request State that the stacked layers of one
// request share, and serves as their core.Exchange. The first layer
// takes a State from a pool and puts it in the request's user values;
// every layer holds a reference while it runs (counted by adapter.Shared,
// as in the adapters of routers built on *http.Request), and the last one
// out returns the State to the pool. So a layer that keeps running after the
// first one returned (behind a timeout middleware that runs the rest of
// the chain on its own goroutine) never works on recycled state: its
// concurrency slots and guard places come back, and no other request's
// decision is ever written into its own, nor its into another's.
//
// Unlike net/http's, a Fiber request's contexts (the fiber.Ctx and the
// fasthttp.RequestCtx) go back to the router when the first layer returns:
// Fiber may answer the request then, and Fiber v2 recycles both for the
// next request. So from that moment on no layer reads or writes the
// response, runs the rest of the chain or reads the response status, and
// a layer that arrives then does nothing at all; a layer also writes
// nothing once the request's context has ended, since whatever ended it
// answers the request. The lock of the State's adapter.Shared orders the
// first layer's return against every other layer's use of the response. What Fiber itself and
// the application's handlers do with a context they keep past that moment
// is beyond the adapter: Fiber v2's timeout.New documents data races of
// its own.
//
// Harden and Linger are what the adapters' Serve adds to a Fiber app's
// server (fasthttp), so that slow and silent clients get an answer or a
// close within its timeouts.
package fastreq

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// Method returns the method held in a request buffer as a string that
// does not alias it: a constant for the standard methods (compared without
// a copy), a copy otherwise.
func Method(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodConnect:
		return http.MethodConnect
	case http.MethodTrace:
		return http.MethodTrace
	}
	return string(m)
}

// ShortTail is the longest path and query that [Conn.Owned] copies into
// one allocation. A key that keeps the path then keeps at most this many
// bytes of query alive with it.
const ShortTail = 128

// Conn remembers the text of the latest request's TCP remote address, so
// that the requests of one connection format it once. Its zero value is
// ready; it belongs to pooled per-request state and is not safe for
// concurrent use.
type Conn struct {
	addr *net.TCPAddr
	text string
}

// Owned returns the remote address, formatted as net/http formats a
// connection's address ("127.0.0.1:5000", "[::1]:5000"), and copies of
// path and query. The text of a TCP address is kept for the next request
// from the same connection; a short path and query share one allocation.
func (c *Conn) Owned(addr net.Addr, path, query []byte) (remote, p, q string) {
	ta, _ := addr.(*net.TCPAddr)
	if ta == nil || ta != c.addr {
		// Any net.Addr is possible (a PROXY-protocol listener's, say), and
		// not every type can be compared: only a *net.TCPAddr is kept.
		var buf [64]byte
		c.addr, c.text = ta, string(AppendAddr(buf[:0], addr))
	}
	if len(path)+len(query) > ShortTail {
		return c.text, string(path), string(query)
	}
	var sb strings.Builder
	sb.Grow(len(path) + len(query))
	sb.Write(path)
	sb.Write(query)
	s := sb.String()
	return c.text, s[:len(path)], s[len(path):]
}

// AppendAddr appends a's text as net.TCPAddr.String would write it.
func AppendAddr(b []byte, a net.Addr) []byte {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return append(b, a.String()...)
	}
	if ip4 := ta.IP.To4(); ip4 != nil && ta.Zone == "" {
		for i, x := range ip4 {
			if i > 0 {
				b = append(b, '.')
			}
			b = strconv.AppendUint(b, uint64(x), 10)
		}
	} else if ip, ok := netip.AddrFromSlice(ta.IP); ok && ip.Is6() && !ip.Is4In6() {
		b = append(b, '[')
		b = ip.WithZone(ta.Zone).AppendTo(b)
		b = append(b, ']')
	} else {
		return append(b, a.String()...)
	}
	b = append(b, ':')
	return strconv.AppendInt(b, int64(ta.Port), 10)
}

// Header reads fasthttp request headers as a core.HeaderReader, copying
// every value it returns.
type Header fasthttp.RequestHeader

// Get returns a copy of the first value of the named header, or "".
func (h *Header) Get(name string) string {
	return string((*fasthttp.RequestHeader)(h).Peek(name))
}

// Values returns copies of every value of the named header, in order.
func (h *Header) Values(name string) []string {
	all := (*fasthttp.RequestHeader)(h).PeekAll(name)
	if len(all) == 0 {
		return nil
	}
	out := make([]string, len(all))
	for i, v := range all {
		out[i] = string(v)
	}
	return out
}

// Local returns the user value (Fiber's local) of fc under key. A string
// is copied, since a local may hold a string borrowed from the request.
func Local(fc *fasthttp.RequestCtx, key any) any {
	x := fc.UserValue(key)
	if s, ok := x.(string); ok {
		return strings.Clone(s)
	}
	return x
}

// SetHeader sets the response header field name, already in canonical
// form, to value, copying both through buf (returned for reuse):
// SetCanonical skips fasthttp's normalization, which Set would do on a
// copy.
func SetHeader(h *fasthttp.ResponseHeader, buf []byte, name, value string) []byte {
	buf = append(append(buf[:0], name...), value...)
	h.SetCanonical(buf[:len(name)], buf[len(name):])
	return buf
}

// SetFields sets the header fields of a denial on h, replacing any value
// the response had.
func SetFields(h *fasthttp.ResponseHeader, fields http.Header) {
	for k, vs := range fields {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}
