package fibermw_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/fibermw"
	"github.com/quotagate/quotagate/internal/adaptertest"
)

// serveFiber serves a catch-all route behind mw on a real listener.
func serveFiber(t *testing.T, mw fiber.Handler) string {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recover.New(), func(c *fiber.Ctx) error {
		c.Locals("user", c.Get("X-User"))
		return c.Next()
	}, mw)
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	return "http://" + ln.Addr().String()
}

// A request Next passes reaches the handler without a store call or a
// rate-limit field, and needs no key.
func TestNext(t *testing.T) {
	eng, store := adaptertest.Engine(t, 1, nil)
	url := serveFiber(t, fibermw.MustMiddleware(eng, core.Use("b"),
		fibermw.Next(func(c *fiber.Ctx) bool { return c.Path() == "/healthz" })))
	for range 3 {
		adaptertest.WantSkipped(t, adaptertest.Get(t, url, "/healthz", ""), "/healthz")
	}
	if n := store.Takes(); n != 0 {
		t.Fatalf("skipped requests made %d store calls", n)
	}
	if r := adaptertest.Get(t, url, "/a", "k"); r.Status != 200 || store.Takes() != 1 {
		t.Fatalf("limited request: %d after %d store calls", r.Status, store.Takes())
	}
}

// LimitReached answers a denial with Fiber's own rendering, the
// rate-limit fields and Retry-After set.
func TestLimitReached(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, nil)
	url := serveFiber(t, fibermw.MustMiddleware(eng, core.Use("b"), fibermw.LimitReached(func(c *fiber.Ctx) error {
		return c.Status(http.StatusTooManyRequests).SendString("slow down, " + fibermw.DecisionFrom(c).DeniedBy)
	})))
	if r := adaptertest.Get(t, url, "/", "k"); r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	adaptertest.WantDenied(t, adaptertest.Get(t, url, "/", "k"), 429, "slow down, b", "second request")
}

// KeyGenerator reads the *fiber.Ctx, here a local an earlier middleware
// set from a request header (a borrowed string: the key is copied).
func TestKeyGenerator(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, fibermw.KeyGenerator(func(c *fiber.Ctx) string {
		u, _ := c.Locals("user").(string)
		return u
	}))
	url := serveFiber(t, fibermw.MustMiddleware(eng, core.Use("b")))
	get := func(user string) int {
		req, _ := http.NewRequest(http.MethodGet, url+"/", nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if a1, a2, b1 := get("alice"), get("alice"), get("bob"); a1 != 200 || a2 != 429 || b1 != 200 {
		t.Fatalf("alice %d then %d, bob %d; want 200, 429, 200", a1, a2, b1)
	}
	// No key: the budget's MissingKey (deny, 400: not a credential).
	if n := get(""); n != http.StatusBadRequest {
		t.Fatalf("no user: %d, want 400", n)
	}
}
