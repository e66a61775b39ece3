package limittest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Skip checks core.Skip: a skipped request reaches the handler without
// spending or reporting anything; the others are limited as usual.
func Skip(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "one", Algorithm: core.SlidingLog, Quota: 1, Window: time.Hour, Key: byClient})
	l := layer(t, eng, core.Use("one"), core.Skip(func(r *core.Request) bool { return r.Path == "/g/health" }))
	var health counter
	app := App{Groups: []Group{{Prefix: "/g", Layers: []*core.Layer{l}, Routes: []Route{
		route(http.MethodGet, "/health", &health),
		route(http.MethodGet, "/x", nil),
	}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	for i := 1; i <= 3; i++ {
		r := c.do(http.MethodGet, "/g/health", ClientHeader, id)
		what := fmt.Sprintf("skipped request %d", i)
		wantStatus(t, r, http.StatusOK, what)
		wantNoHeader(t, r, what, core.HeaderPolicy, core.HeaderRateLimit, core.HeaderRetryAfter)
	}
	if n := health.n.Load(); n != 3 {
		t.Errorf("skipped route's handler ran %d times, want 3", n)
	}
	r := c.do(http.MethodGet, "/g/x", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "first limited request")
	wantHeader(t, r, core.HeaderPolicy, policy("one", 1, 3600), "first limited request")
	wantStatus(t, c.do(http.MethodGet, "/g/x", ClientHeader, id), http.StatusTooManyRequests, "second limited request")
	// Skipping needs no key: a request without one is not denied.
	wantStatus(t, c.do(http.MethodGet, "/g/health"), http.StatusOK, "skipped request without a key")
}

// CountWhen checks core.CountWhen on a login route that counts only 401
// answers, inside an outer layer that counts every request: successes give
// their login charge back after the handler, failures keep it, and the
// outer layer is not affected.
func CountWhen(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "outer", Algorithm: core.SlidingLog, Quota: 100, Window: time.Hour, Key: byClient},
		core.Budget{Name: "login", Algorithm: core.SlidingLog, Quota: 2, Window: time.Hour, Key: byClient})
	outer := layer(t, eng, core.Use("outer"))
	login := layer(t, eng, core.Use("login"), core.CountWhen(func(status int) bool { return status == http.StatusUnauthorized }))
	var good, bad counter
	ok := route(http.MethodPost, "/ok", &good, login)
	fail := route(http.MethodPost, "/fail", &bad, login)
	fail.Status = http.StatusUnauthorized
	app := App{Groups: []Group{{Prefix: "/login", Layers: []*core.Layer{outer}, Routes: []Route{ok, fail}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	for i := 1; i <= 4; i++ {
		r := c.do(http.MethodPost, "/login/ok", ClientHeader, id)
		wantStatus(t, r, http.StatusOK, fmt.Sprintf("successful login %d", i))
		// The fields are written before the handler runs: they show the
		// charge, which is given back afterwards.
		wantLimits(t, r, fmt.Sprintf("successful login %d", i), "outer", 100-i, "login", 1)
	}
	for i := 1; i <= 2; i++ {
		r := c.do(http.MethodPost, "/login/fail", ClientHeader, id)
		wantStatus(t, r, http.StatusUnauthorized, fmt.Sprintf("failed login %d", i))
	}
	r := c.do(http.MethodPost, "/login/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusTooManyRequests, "login after two failures")
	// Six requests reached the handler and kept the outer charge; the
	// denied one was refunded there.
	wantLimits(t, r, "login after two failures", "outer", 94, "login", 0)
	if g, b := good.n.Load(), bad.n.Load(); g != 4 || b != 2 {
		t.Errorf("handlers ran %d and %d times, want 4 and 2", g, b)
	}
}

// Disconnect checks a client that goes away during a shaping wait: the
// server keeps answering other clients at once, and the abandoned request
// never turns into an error for anyone else.
func Disconnect(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "shape", Algorithm: core.LeakyBucket, Quota: 1, Window: 2 * time.Second, MaxWait: 5 * time.Second, Key: byClient})
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/shape", nil, layer(t, eng, core.Use("shape"))),
	}}}}
	base := cfg.Serve(t, app)
	c := newClient(t, base)
	id := newID()
	wantStatus(t, c.do(http.MethodPost, "/shape", ClientHeader, id), http.StatusOK, "first request")
	// The second request's slot is two seconds away: give up after 200 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/shape", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(ClientHeader, id)
	if res, err := c.hc.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the abandoned request was answered with %d before its slot", res.StatusCode)
	}
	// Another client is served while the abandoned request waits or ends.
	for i := 1; i <= 3; i++ {
		wantStatus(t, c.do(http.MethodPost, "/shape", ClientHeader, newID()), http.StatusOK, fmt.Sprintf("other client %d", i))
	}
}
