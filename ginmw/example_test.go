package ginmw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/keyfunc"
)

// A budget on every route and a stricter one on a write route: the two
// layers stack, and the response reports both budgets.
func Example() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	peerIP := keyfunc.PeerIP()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "per_ip", Algorithm: core.TokenBucket, Quota: 60, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
		{Name: "writes", Algorithm: core.TokenBucket, Quota: 10, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
	}})

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	api := r.Group("/api", ginmw.MustMiddleware(eng, core.Use("per_ip")))
	api.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	api.POST("/items", ginmw.MustMiddleware(eng, core.Use("writes")), func(c *gin.Context) {
		c.Status(http.StatusCreated)
	})

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/items", nil))
	fmt.Println(w.Code, w.Header().Get("RateLimit"))
	// Output: 201 "per_ip";r=59;t=1, "writes";r=9;t=6
}

// A handler reads the decision, for example to log the remaining quota.
func ExampleDecisionFrom() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "per_ip", Quota: 100, Window: time.Hour, Key: keyfunc.PeerIP()},
	}})
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginmw.MustMiddleware(eng, core.Use("per_ip")))
	r.GET("/", func(c *gin.Context) {
		d := ginmw.DecisionFrom(c)
		fmt.Println(d.Results[0].Budget, d.Results[0].Remaining)
	})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	// Output: per_ip 99
}

// The one-call start: 100 requests per minute per client IP, health checks
// skipped, and a denial rendered with Gin's own JSON.
func ExampleLimitBy() {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginmw.LimitBy(1, time.Minute, keyfunc.PeerIP(),
		ginmw.Skip(func(c *gin.Context) bool { return c.FullPath() == "/healthz" }),
		ginmw.OnDeny(func(c *gin.Context) {
			c.JSON(http.StatusTooManyRequests, gin.H{"error": "slow down"})
		})))
	r.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusOK) })
	r.GET("/a", func(c *gin.Context) { c.Status(http.StatusOK) })
	for _, path := range []string{"/healthz", "/healthz", "/a", "/a"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("%s %d %q\n", path, w.Code, w.Body.String())
	}
	// Output:
	// /healthz 200 ""
	// /healthz 200 ""
	// /a 200 ""
	// /a 429 "{\"error\":\"slow down\"}"
}
