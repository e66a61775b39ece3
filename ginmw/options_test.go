package ginmw_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/internal/adaptertest"
)

func serveGin(t *testing.T, mw gin.HandlerFunc) string {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery(), func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")) }, mw)
	r.GET("/*any", func(c *gin.Context) { c.Status(http.StatusOK) })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A skipped request reaches the handler without a store call or a
// rate-limit field, and needs no key.
func TestSkip(t *testing.T) {
	eng, store := adaptertest.Engine(t, 1, nil)
	url := serveGin(t, ginmw.MustMiddleware(eng, core.Use("b"),
		ginmw.Skip(func(c *gin.Context) bool { return c.Request.URL.Path == "/healthz" })))
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

// OnDeny answers a denial with Gin's own rendering, the rate-limit fields
// and Retry-After set; the chain is aborted.
func TestOnDeny(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, nil)
	url := serveGin(t, ginmw.MustMiddleware(eng, core.Use("b"), ginmw.OnDeny(func(c *gin.Context) {
		c.String(http.StatusTooManyRequests, "slow down, "+ginmw.DecisionFrom(c).DeniedBy)
	})))
	if r := adaptertest.Get(t, url, "/", "k"); r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	adaptertest.WantDenied(t, adaptertest.Get(t, url, "/", "k"), 429, "slow down, b", "second request")
}

// Key reads the *gin.Context: here a user an earlier middleware set.
func TestKey(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, ginmw.Key(func(c *gin.Context) (string, error) {
		if u := c.GetString("user"); u != "" {
			return u, nil
		}
		return "", core.ErrNoKey
	}))
	url := serveGin(t, ginmw.MustMiddleware(eng, core.Use("b")))
	get := func(user string) int {
		req, _ := http.NewRequest(http.MethodGet, url+"/", nil)
		req.Header.Set("X-User", user)
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
}
