package fibermw_test

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw"
)

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
// connections report a remote address of a non-comparable type. Any
// net.Addr is legal; the middleware must key the request by its text, not
// panic (fasthttp does not recover handler panics: without the recover
// middleware used here, the process would crash).
func TestNonComparableRemoteAddr(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 100)
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{{
		Name: "peer", Quota: 1000, Window: time.Minute,
		Key: func(r *core.Request) (string, error) {
			select {
			case seen <- r.RemoteAddr:
			default:
			}
			return r.RemoteAddr, nil
		},
	}}})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recover.New())
	app.Get("/", fibermw.MustMiddleware(eng, core.Use("peer")), func(c *fiber.Ctx) error { return c.SendString("ok") })
	done := make(chan error, 1)
	go func() { done <- app.Listener(valueAddrListener{raw}) }()
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
