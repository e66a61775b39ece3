package fibermw_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw"
)

// recordingStore keeps every key it is given, as given (so a borrowed one
// would change under it), next to a copy made on arrival.
type recordingStore struct {
	core.Store
	mu   sync.Mutex
	keys [][2]string
}

func (s *recordingStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	s.mu.Lock()
	for _, it := range items {
		s.keys = append(s.keys, [2]string{it.Key, strings.Clone(it.Key)})
	}
	s.mu.Unlock()
	return s.Store.Take(ctx, items, out)
}

// TestKeysDoNotAliasRequestBuffers sends many requests over one keep-alive
// connection, so fasthttp reuses its buffers, with key functions that
// return request strings as they are: header values (Get and Values), the
// remote address, the path, the query, the method (which changes from request to
// request), the route and a local holding a string borrowed from the
// request. Every key the store kept must still
// read as it did when it arrived, and the first client's exhausted budget
// must still be exhausted at the end.
func TestKeysDoNotAliasRequestBuffers(t *testing.T) {
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	rec := &recordingStore{Store: ms}
	keyOf := func(f func(r *core.Request) string) core.KeyFunc {
		return func(r *core.Request) (string, error) { return f(r), nil }
	}
	bud := func(name string, quota int64, f func(r *core.Request) string) core.Budget {
		return core.Budget{Name: name, Algorithm: core.TokenBucket, Quota: quota, Window: time.Hour, Key: keyOf(f)}
	}
	eng := core.MustNew(core.Config{Store: rec, Budgets: []core.Budget{
		bud("header", 1, func(r *core.Request) string { return r.Header.Get("X-Client") }),
		bud("values", 1000, func(r *core.Request) string { return r.Header.Values("X-Client")[0] }),
		bud("remote", 1000, func(r *core.Request) string { return r.RemoteAddr }),
		bud("path", 1000, func(r *core.Request) string { return r.Path }),
		bud("query", 1000, func(r *core.Request) string { return r.RawQuery }),
		bud("method", 1000, func(r *core.Request) string { return r.Method }),
		bud("route", 1000, func(r *core.Request) string { return r.Route }),
		bud("local", 1000, func(r *core.Request) string { s, _ := r.Value("tenant").(string); return s }),
	}})
	mw := fibermw.MustMiddleware(eng, core.Use("header", "values", "remote", "path", "query", "method", "route", "local"))
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		c.Locals("tenant", c.Get("X-Tenant")) // borrowed from the request
		return c.Next()
	})
	methods := []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	for _, m := range methods {
		app.Add(m, "/k/:n", mw, func(c *fiber.Ctx) error { return c.SendString("ok") })
	}
	base := listen(t, app)

	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	send := func(i int) int {
		t.Helper()
		req, _ := http.NewRequest(methods[i%len(methods)], fmt.Sprintf("%s/k/%04d?q=%04d", base, i, i), nil)
		req.Header.Set("X-Client", fmt.Sprintf("client-%04d", i))
		req.Header.Set("X-Tenant", fmt.Sprintf("tenant-%04d", i))
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if s := send(0); s != http.StatusOK {
		t.Fatalf("first request: status %d", s)
	}
	for i := 1; i <= 300; i++ {
		if s := send(i); s != http.StatusOK {
			t.Fatalf("request %d: status %d", i, s)
		}
	}
	if s := send(0); s != http.StatusTooManyRequests {
		t.Errorf("client-0000 again: status %d, want 429 (its key must still be in the store)", s)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.keys) < 8*300 {
		t.Fatalf("store saw %d keys, want at least %d", len(rec.keys), 8*300)
	}
	bad := 0
	for _, k := range rec.keys {
		if k[0] != k[1] {
			if bad < 5 {
				t.Errorf("a key the store kept changed from %q to %q", k[1], k[0])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys changed after their request", bad, len(rec.keys))
	}
}

// TestRemoteAddrFormat checks that RemoteAddr reads as net/http writes a
// connection's address, for IPv4 and IPv6 peers, whatever the forwarding
// headers say.
func TestRemoteAddrFormat(t *testing.T) {
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(network, func(t *testing.T) {
			ln, err := net.Listen("tcp", network)
			if err != nil {
				t.Skipf("cannot listen on %s: %v", network, err)
			}
			seen := make(chan string, 1)
			eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: []core.Budget{{
				Name: "peer", Quota: 10, Window: time.Minute,
				Key: func(r *core.Request) (string, error) { seen <- r.RemoteAddr; return r.RemoteAddr, nil },
			}}})
			app := fiber.New(fiber.Config{DisableStartupMessage: true, ProxyHeader: fiber.HeaderXForwardedFor})
			app.Get("/", fibermw.MustMiddleware(eng, core.Use("peer")), func(c *fiber.Ctx) error { return c.SendString("ok") })
			done := make(chan error, 1)
			go func() { done <- app.Listener(ln) }()
			t.Cleanup(func() { _ = app.Shutdown(); <-done })

			var local string
			dial := func(ctx context.Context, netw, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, netw, addr)
				if err == nil {
					local = c.LocalAddr().String()
				}
				return c, err
			}
			hc := &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}
			req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
			req.Header.Set("X-Forwarded-For", "203.0.113.5")
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if got := <-seen; got != local {
				t.Errorf("RemoteAddr %q, want the client's socket address %q", got, local)
			}
		})
	}
}
