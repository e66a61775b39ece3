package fibermw_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/fibermw"
)

// oneBudget returns an engine with one budget keyed by key.
func oneBudget(t *testing.T, key core.KeyFunc) *core.Engine {
	t.Helper()
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	return core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "b", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: key},
	}})
}

func constKey(*core.Request) (string, error) { return "k", nil }

func TestMiddlewareConfigErrors(t *testing.T) {
	eng := oneBudget(t, constKey)
	mw, err := fibermw.Middleware(eng, core.Use("nope"))
	var ce *core.ConfigError
	if mw != nil || !errors.As(err, &ce) {
		t.Fatalf("Middleware with an unknown budget: %v, %v; want nil and a *core.ConfigError", mw != nil, err)
	}
	if _, err := fibermw.Middleware(eng); err == nil {
		t.Error("Middleware without budgets: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustMiddleware with an unknown budget did not panic")
		}
	}()
	fibermw.MustMiddleware(eng, core.Use("nope"))
}

// test sends one request through app in process.
func test(t *testing.T, app *fiber.App, method, target string) *http.Response {
	t.Helper()
	res, err := app.Test(httptest.NewRequest(method, target, nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// TestDecisionFrom checks that the handler reads the request's decision,
// and that there is none outside a layer: before it, and after the request
// finished (the state is pooled).
func TestDecisionFrom(t *testing.T) {
	eng := oneBudget(t, constKey)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	var before, after *core.Decision
	remaining := int64(-1)
	app.Use(func(c *fiber.Ctx) error {
		before = fibermw.DecisionFrom(c)
		err := c.Next()
		after = fibermw.DecisionFrom(c)
		return err
	})
	app.Use(fibermw.MustMiddleware(eng, core.Use("b")))
	app.Get("/x", func(c *fiber.Ctx) error {
		if d := fibermw.DecisionFrom(c); d != nil && d.Allowed && len(d.Results) == 1 && d.Results[0].Budget == "b" {
			remaining = d.Results[0].Remaining
		}
		return c.SendStatus(http.StatusNoContent)
	})
	if res := test(t, app, http.MethodGet, "/x"); res.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", res.StatusCode)
	}
	if remaining != 4 {
		t.Errorf("handler read remaining %d, want an allowed decision with b at 4", remaining)
	}
	if before != nil || after != nil {
		t.Errorf("DecisionFrom before the layer %v, after the request %v; want nil", before, after)
	}
	if fibermw.DecisionFrom(nil) != nil {
		t.Error("DecisionFrom(nil) is not nil")
	}
}

type ctxKey struct{}

// TestRouteAndValues checks what key functions see in Fiber: in group
// middleware the route is the group's prefix (Fiber has not matched the
// final route yet), a route-level layer sees the pattern and updates it
// for the whole decision; locals and values of the user context are
// readable.
func TestRouteAndValues(t *testing.T) {
	type seen struct {
		route, path string
		val, ctx    any
	}
	var got []seen
	key := func(r *core.Request) (string, error) {
		got = append(got, seen{r.Route, r.Path, r.Value("tenant"), r.Value(ctxKey{})})
		return "k", nil
	}
	st := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	eng := core.MustNew(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "b", Quota: 5, Window: time.Minute, Key: key},
		{Name: "r", Quota: 5, Window: time.Minute, Key: key},
	}})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		c.Locals("tenant", "from-locals")
		c.SetUserContext(context.WithValue(c.UserContext(), ctxKey{}, "from-context"))
		return c.Next()
	})
	api := app.Group("/api", fibermw.MustMiddleware(eng, core.Use("b")))
	api.Get("/users/:id", fibermw.MustMiddleware(eng, core.Use("r")), func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })

	if res := test(t, app, http.MethodGet, "/api/users/42"); res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	want := []seen{
		{"/api", "/api/users/42", "from-locals", "from-context"},
		{"/api/users/:id", "/api/users/42", "from-locals", "from-context"},
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
