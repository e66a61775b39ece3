package fiberv3_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
)

// countingStore counts the store calls that charge.
type countingStore struct {
	core.Store
	takes atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	s.takes.Add(1)
	return s.Store.Take(ctx, items, out)
}

// oneBudget returns an engine with one budget "b" of quota requests per
// minute keyed by key, and its store.
func oneBudget(t *testing.T, quota int64, key core.KeyFunc) (*core.Engine, *countingStore) {
	t.Helper()
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	st := &countingStore{Store: ms}
	return core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "b", Algorithm: core.TokenBucket, Quota: quota, Window: time.Minute, Key: key},
	}}), st
}

func constKey(*core.Request) (string, error) { return "k", nil }

type response struct {
	status int
	header http.Header
	body   string
}

// do sends one request through app in process.
func do(t *testing.T, app *fiber.App, method, target string) response {
	t.Helper()
	res, err := app.Test(httptest.NewRequest(method, target, nil), fiber.TestConfig{Timeout: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, string(body)}
}

func TestMiddlewareConfigErrors(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	mw, err := fiberv3.Middleware(eng, core.Use("nope"))
	var ce *core.ConfigError
	if mw != nil || !errors.As(err, &ce) {
		t.Fatalf("Middleware with an unknown budget: %v, %v; want nil and a *core.ConfigError", mw != nil, err)
	}
	if _, err := fiberv3.Middleware(eng); err == nil {
		t.Error("Middleware without budgets: no error")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("LimitBy without a key function did not panic")
			}
		}()
		fiberv3.LimitBy(10, time.Minute, nil)
	}()
	defer func() {
		if recover() == nil {
			t.Error("MustMiddleware with an unknown budget did not panic")
		}
	}()
	fiberv3.MustMiddleware(eng, core.Use("nope"))
}

// TestDecisionFrom checks that the handler reads the request's decision,
// and that there is none outside a layer: before it, and after the request
// finished (the state is pooled).
func TestDecisionFrom(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	app := fiber.New()
	var before, after *core.Decision
	remaining := int64(-1)
	app.Use(func(c fiber.Ctx) error {
		before = fiberv3.DecisionFrom(c)
		err := c.Next()
		after = fiberv3.DecisionFrom(c)
		return err
	})
	app.Use(fiberv3.MustMiddleware(eng, core.Use("b")))
	app.Get("/x", func(c fiber.Ctx) error {
		if d := fiberv3.DecisionFrom(c); d != nil && d.Allowed && len(d.Results) == 1 && d.Results[0].Budget == "b" {
			remaining = d.Results[0].Remaining
		}
		return c.SendStatus(http.StatusNoContent)
	})
	if r := do(t, app, http.MethodGet, "/x"); r.status != http.StatusNoContent {
		t.Fatalf("status %d", r.status)
	}
	if remaining != 4 {
		t.Errorf("handler read remaining %d, want an allowed decision with b at 4", remaining)
	}
	if before != nil || after != nil {
		t.Errorf("DecisionFrom before the layer %v, after the request %v; want nil", before, after)
	}
	if fiberv3.DecisionFrom(nil) != nil {
		t.Error("DecisionFrom(nil) is not nil")
	}
}

type ctxKey struct{}

// TestRouteAndValues checks what key functions see in Fiber v3: in group
// middleware the route is the group's prefix, a route-level layer sees the
// pattern; locals and values of the user context (c.SetContext) are
// readable.
func TestRouteAndValues(t *testing.T) {
	type seen struct {
		route, path, query, method string
		val, ctx                   any
	}
	var got []seen
	key := func(r *core.Request) (string, error) {
		got = append(got, seen{r.Route, r.Path, r.RawQuery, r.Method, r.Value("tenant"), r.Value(ctxKey{})})
		return "k", nil
	}
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	eng := core.MustNew(core.Config{Store: ms, Budgets: []core.Budget{
		{Name: "b", Quota: 5, Window: time.Minute, Key: key},
		{Name: "r", Quota: 5, Window: time.Minute, Key: key},
	}})
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		c.Locals("tenant", "from-locals")
		c.SetContext(context.WithValue(c.Context(), ctxKey{}, "from-context"))
		return c.Next()
	})
	api := app.Group("/api", fiberv3.MustMiddleware(eng, core.Use("b")))
	api.Patch("/users/:id", fiberv3.MustMiddleware(eng, core.Use("r")), func(c fiber.Ctx) error { return c.SendStatus(http.StatusOK) })

	if r := do(t, app, http.MethodPatch, "/api/users/42?x=1"); r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	want := []seen{
		{"/api", "/api/users/42", "x=1", "PATCH", "from-locals", "from-context"},
		{"/api/users/:id", "/api/users/42", "x=1", "PATCH", "from-locals", "from-context"},
	}
	if len(got) != len(want) {
		t.Fatalf("key functions ran %d times, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("layer %d: key function saw %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestNext checks that a request Next skips reaches the handler without a
// store call and without rate-limit header fields, while the others are
// limited.
func TestNext(t *testing.T) {
	eng, st := oneBudget(t, 1, constKey)
	app := fiber.New()
	app.Use(fiberv3.MustMiddleware(eng, core.Use("b"),
		fiberv3.Next(func(c fiber.Ctx) bool { return c.Path() == "/healthz" })))
	ok := func(c fiber.Ctx) error { return c.SendString("ok") }
	app.Get("/healthz", ok)
	app.Get("/x", ok)
	for i := 0; i < 3; i++ {
		r := do(t, app, http.MethodGet, "/healthz")
		if r.status != http.StatusOK || r.body != "ok" {
			t.Fatalf("skipped request %d: status %d, body %q", i, r.status, r.body)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := r.header.Get(h); v != "" {
				t.Errorf("skipped request %d: %s: %q, want none", i, h, v)
			}
		}
	}
	if n := st.takes.Load(); n != 0 {
		t.Errorf("skipped requests made %d store calls, want 0", n)
	}
	if r := do(t, app, http.MethodGet, "/x"); r.status != http.StatusOK || r.header.Get("RateLimit") == "" {
		t.Errorf("first /x: status %d, RateLimit %q", r.status, r.header.Get("RateLimit"))
	}
	if r := do(t, app, http.MethodGet, "/x"); r.status != http.StatusTooManyRequests {
		t.Errorf("second /x: status %d, want 429 (the skipped requests must not have spent the budget, the others must)", r.status)
	}
}

// TestLimitReached checks that LimitReached answers a denial with its own
// body, with the rate-limit header fields and Retry-After already set, and
// that the handler behind the layer does not run.
func TestLimitReached(t *testing.T) {
	eng, _ := oneBudget(t, 1, constKey)
	var reachedDenied, handled atomic.Int64
	app := fiber.New()
	app.Use(fiberv3.MustMiddleware(eng, core.Use("b"), fiberv3.LimitReached(func(c fiber.Ctx) error {
		if d := fiberv3.DecisionFrom(c); d != nil && !d.Allowed {
			reachedDenied.Add(1)
		}
		return c.Status(fiber.StatusTooManyRequests).JSON(fiber.Map{"error": "slow down"})
	})))
	app.Get("/", func(c fiber.Ctx) error { handled.Add(1); return c.SendString("ok") })
	if r := do(t, app, http.MethodGet, "/"); r.status != http.StatusOK {
		t.Fatalf("first request: status %d", r.status)
	}
	r := do(t, app, http.MethodGet, "/")
	if r.status != http.StatusTooManyRequests || r.body != `{"error":"slow down"}` {
		t.Errorf("denied request: status %d, body %q; want 429 and LimitReached's body", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("denied request: Content-Type %q, want LimitReached's application/json", ct)
	}
	if r.header.Get("Retry-After") == "" || r.header.Get("RateLimit-Policy") != `"b";q=1;w=60` ||
		!strings.HasPrefix(r.header.Get("RateLimit"), `"b";r=0;t=`) {
		t.Errorf("denied request: header %v, want Retry-After and the rate-limit fields", r.header)
	}
	if reachedDenied.Load() != 1 || handled.Load() != 1 {
		t.Errorf("LimitReached saw a denied decision %d times, handler ran %d times; want 1 and 1", reachedDenied.Load(), handled.Load())
	}
}

// TestKeyGenerator checks that a KeyGenerator keys by what the fiber.Ctx
// says, and that an empty key is a missing key (denied by default).
func TestKeyGenerator(t *testing.T) {
	eng, _ := oneBudget(t, 1, fiberv3.KeyGenerator(func(c fiber.Ctx) string { return c.Get("X-User") }))
	app := fiber.New()
	app.Use(fiberv3.MustMiddleware(eng, core.Use("b")))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	send := func(user string) int {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		res, err := app.Test(req, fiber.TestConfig{Timeout: 0})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		user string
		want int
	}{{"ann", 200}, {"bob", 200}, {"ann", 429}, {"bob", 429}} {
		if got := send(c.user); got != c.want {
			t.Errorf("user %q: status %d, want %d", c.user, got, c.want)
		}
	}
	if got := send(""); got < 400 || got == http.StatusTooManyRequests {
		t.Errorf("no X-User: status %d, want the missing-key denial", got)
	}
	if _, err := fiberv3.KeyGenerator(func(fiber.Ctx) string { return "k" })(&core.Request{}); !errors.Is(err, core.ErrNoKey) {
		t.Errorf("KeyGenerator outside Fiber: %v, want core.ErrNoKey", err)
	}
}

// TestSkipRequests checks SkipSuccessfulRequests (the login case: only
// failures count) and SkipFailedRequests, with a handler that answers
// failures by returning fiber.NewError for Fiber's error handler.
func TestSkipRequests(t *testing.T) {
	login := func(c fiber.Ctx) error {
		if c.Query("password") != "right" {
			return fiber.NewError(fiber.StatusUnauthorized, "wrong password")
		}
		return c.SendString("welcome")
	}
	for _, c := range []struct {
		name    string
		opt     core.LayerOption
		counted string // the requests that count
		free    string // the requests that do not
		freeSt  int
	}{
		{"SkipSuccessfulRequests", fiberv3.SkipSuccessfulRequests(), "/login?password=wrong", "/login?password=right", http.StatusOK},
		{"SkipFailedRequests", fiberv3.SkipFailedRequests(), "/login?password=right", "/login?password=wrong", http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng, _ := oneBudget(t, 3, constKey)
			app := fiber.New()
			app.Post("/login", fiberv3.MustMiddleware(eng, core.Use("b"), c.opt), login)
			for i := 0; i < 5; i++ {
				if r := do(t, app, http.MethodPost, c.free); r.status != c.freeSt {
					t.Fatalf("uncounted request %d: status %d, want %d", i, r.status, c.freeSt)
				}
			}
			for i := 0; i < 3; i++ {
				if r := do(t, app, http.MethodPost, c.counted); r.status == http.StatusTooManyRequests {
					t.Fatalf("counted request %d: denied, but the uncounted ones must have been refunded", i)
				}
			}
			r := do(t, app, http.MethodPost, c.free)
			if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
				t.Errorf("after 3 counted requests: status %d, Retry-After %q; want 429", r.status, r.header.Get("Retry-After"))
			}
		})
	}
}

// TestHandlerPanic checks that a handler panic passes through the layer to
// Fiber's recover middleware (500), that the request's charge is kept, and
// that the pooled state is released: the next request is served normally.
func TestHandlerPanic(t *testing.T) {
	eng, _ := oneBudget(t, 5, constKey)
	app := fiber.New()
	app.Use(fiberrecover.New())
	var after *core.Decision
	app.Use(func(c fiber.Ctx) error {
		err := c.Next()
		after = fiberv3.DecisionFrom(c)
		return err
	})
	app.Use(fiberv3.MustMiddleware(eng, core.Use("b")))
	app.Get("/panic", func(fiber.Ctx) error { panic("boom") })
	app.Get("/ok", func(c fiber.Ctx) error { return c.SendString("ok") })
	if r := do(t, app, http.MethodGet, "/panic"); r.status != http.StatusInternalServerError {
		t.Fatalf("panicking handler: status %d, want 500", r.status)
	}
	r := do(t, app, http.MethodGet, "/ok")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("RateLimit"), `"b";r=3;t=`) {
		t.Errorf("after the panic: status %d, RateLimit %q; want 200 and r=3 (the panicking request was charged)", r.status, r.header.Get("RateLimit"))
	}
	if after != nil {
		t.Error("the state outlived the request")
	}
}

// TestStackedLimitReached checks that each of two stacked layers answers
// its own denials with its own LimitReached.
func TestStackedLimitReached(t *testing.T) {
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	eng := core.MustNew(core.Config{Store: ms, Budgets: []core.Budget{
		{Name: "outer", Quota: 3, Window: time.Minute, Key: constKey},
		{Name: "inner", Quota: 1, Window: time.Minute, Key: constKey},
	}})
	reached := func(who string) core.LayerOption {
		return fiberv3.LimitReached(func(c fiber.Ctx) error { return c.Status(fiber.StatusTooManyRequests).SendString(who) })
	}
	app := fiber.New()
	g := app.Group("/g", fiberv3.MustMiddleware(eng, core.Use("outer"), reached("outer")))
	g.Get("/in", fiberv3.MustMiddleware(eng, core.Use("inner"), reached("inner")), func(c fiber.Ctx) error { return c.SendString("ok") })
	g.Get("/out", func(c fiber.Ctx) error { return c.SendString("ok") })
	for i, c := range []struct {
		path, body string
	}{{"/g/in", "ok"}, {"/g/in", "inner"}, {"/g/out", "ok"}, {"/g/out", "ok"}, {"/g/out", "outer"}, {"/g/in", "outer"}} {
		if r := do(t, app, http.MethodGet, c.path); r.body != c.body {
			t.Errorf("request %d to %s: status %d, body %q; want %q", i, c.path, r.status, r.body, c.body)
		}
	}
}
