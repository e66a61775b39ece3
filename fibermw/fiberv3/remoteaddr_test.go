package fiberv3_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
)

// peerEngine returns an engine whose one budget keys by RemoteAddr and
// sends what it sees on seen, when there is room.
func peerEngine(t *testing.T, seen chan<- string) *core.Engine {
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	return core.MustNew(core.Config{Store: ms, Budgets: []core.Budget{{
		Name: "peer", Quota: 1000, Window: time.Minute,
		Key: func(r *core.Request) (string, error) {
			select {
			case seen <- r.RemoteAddr:
			default:
			}
			return r.RemoteAddr, nil
		},
	}}})
}

// TestRemoteAddrFormat checks that RemoteAddr reads as net/http writes a
// connection's address, for IPv4 and IPv6 peers, even when Fiber is told
// to trust X-Forwarded-For.
func TestRemoteAddrFormat(t *testing.T) {
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(network, func(t *testing.T) {
			ln, err := net.Listen("tcp", network)
			if err != nil {
				t.Skipf("cannot listen on %s: %v", network, err)
			}
			seen := make(chan string, 1)
			app := fiber.New(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, TrustProxy: true,
				TrustProxyConfig: fiber.TrustProxyConfig{Loopback: true}})
			var ip string // what c.IP() says: the forwarded address
			app.Get("/", fiberv3.MustMiddleware(peerEngine(t, seen), core.Use("peer")), func(c fiber.Ctx) error {
				ip = c.IP()
				return c.SendString("ok")
			})
			done := make(chan error, 1)
			go func() { done <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
			t.Cleanup(func() { _ = app.ShutdownWithTimeout(5 * time.Second); <-done })

			var local string
			dial := func(ctx context.Context, netw, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, netw, addr)
				if err == nil {
					local = c.LocalAddr().String()
				}
				return c, err
			}
			tr := &http.Transport{DialContext: dial}
			t.Cleanup(tr.CloseIdleConnections)
			hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
			req.Header.Set("X-Forwarded-For", "203.0.113.5")
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if got := <-seen; got != local || ip != "203.0.113.5" {
				t.Errorf("RemoteAddr %q, want the client's socket address %q (c.IP() %q)", got, local, ip)
			}
		})
	}
}

// valueAddr is a net.Addr of a value type that is not comparable (it holds
// a slice), as a listener wrapper (PROXY protocol, tunnels) may return.
type valueAddr struct {
	ip   net.IP
	port int
}

func (a valueAddr) Network() string { return "tcp" }
func (a valueAddr) String() string  { return net.JoinHostPort(a.ip.String(), strconv.Itoa(a.port)) }

type valueAddrConn struct{ net.Conn }

func (c valueAddrConn) RemoteAddr() net.Addr {
	ta := c.Conn.RemoteAddr().(*net.TCPAddr)
	return valueAddr{ip: ta.IP, port: ta.Port}
}

type valueAddrListener struct{ net.Listener }

func (l valueAddrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return valueAddrConn{c}, nil
}

// TestNonComparableRemoteAddr serves requests from a listener whose
// connections report a remote address of a non-comparable type: the
// middleware must key the request by its text, not panic.
func TestNonComparableRemoteAddr(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	app := fiber.New()
	app.Use(fiberrecover.New())
	app.Get("/", fiberv3.MustMiddleware(peerEngine(t, seen), core.Use("peer")), func(c fiber.Ctx) error { return c.SendString("ok") })
	done := make(chan error, 1)
	go func() {
		done <- app.Listener(valueAddrListener{raw}, fiber.ListenConfig{DisableStartupMessage: true})
	}()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(5 * time.Second); <-done })

	hc := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + raw.Addr().String() + "/"
	for i := 0; i < 40; i++ { // the pooled state is reused (sync.Pool may drop some)
		res, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 (the middleware panicked comparing remote addresses)", i, res.StatusCode)
		}
		if got := <-seen; got == "" {
			t.Fatalf("request %d: empty RemoteAddr", i)
		}
	}
}
