package fiberv3_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
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
// remote address, the path, the query, the method (which changes from
// request to request), the route, a local holding a string borrowed from
// the request, and a KeyGenerator returning c.Get's borrowed string. Every
// key the store kept must still read as it did when it arrived, and the
// first client's exhausted budget must still be exhausted at the end.
func TestKeysDoNotAliasRequestBuffers(t *testing.T) {
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	rec := &recordingStore{Store: ms}
	keyOf := func(f func(r *core.Request) string) core.KeyFunc {
		return func(r *core.Request) (string, error) { return f(r), nil }
	}
	bud := func(name string, quota int64, key core.KeyFunc) core.Budget {
		return core.Budget{Name: name, Algorithm: core.TokenBucket, Quota: quota, Window: time.Hour, Key: key}
	}
	eng := core.MustNew(core.Config{Store: rec, Budgets: []core.Budget{
		bud("header", 1, keyOf(func(r *core.Request) string { return r.Header.Get("X-Client") })),
		bud("values", 1000, keyOf(func(r *core.Request) string { return r.Header.Values("X-Client")[0] })),
		bud("remote", 1000, keyOf(func(r *core.Request) string { return r.RemoteAddr })),
		bud("path", 1000, keyOf(func(r *core.Request) string { return r.Path })),
		bud("query", 1000, keyOf(func(r *core.Request) string { return r.RawQuery })),
		bud("method", 1000, keyOf(func(r *core.Request) string { return r.Method })),
		bud("route", 1000, keyOf(func(r *core.Request) string { return r.Route })),
		bud("local", 1000, keyOf(func(r *core.Request) string { s, _ := r.Value("tenant").(string); return s })),
		bud("generated", 1000, fiberv3.KeyGenerator(func(c fiber.Ctx) string { return c.Get("X-Tenant") })),
	}})
	mw := fiberv3.MustMiddleware(eng, core.Use("header", "values", "remote", "path", "query", "method", "route", "local", "generated"))
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		c.Locals("tenant", c.Get("X-Tenant")) // borrowed from the request
		return c.Next()
	})
	methods := []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	app.Add(methods, "/k/:n", mw, func(c fiber.Ctx) error { return c.SendString("ok") })
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
	for i := 0; i <= 300; i++ {
		if s := send(i); s != http.StatusOK {
			t.Fatalf("request %d: status %d", i, s)
		}
	}
	if s := send(0); s != http.StatusTooManyRequests {
		t.Errorf("client-0000 again: status %d, want 429 (its key must still be in the store)", s)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.keys) < 9*301 {
		t.Fatalf("store saw %d keys, want at least %d", len(rec.keys), 9*301)
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
