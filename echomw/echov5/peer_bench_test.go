// Echo v5's own rate limiter, measured next to quotagate by
// BenchmarkMiddleware. Unlike Echo v4's (echomw/peer_bench_test.go), it
// needs no build tag: golang.org/x/time, which its package needs, is
// already in the module's requirements.

package echov5_test

import (
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func init() {
	peers = append(peers, benchPeer{
		name:   "echo-ratelimiter",
		header: "X-RateLimit-Remaining", // Echo v5's memory store writes X-RateLimit-Limit and -Remaining
		mw: func(b *testing.B) echo.MiddlewareFunc {
			// A limit the benchmark never reaches, keyed by c.RealIP() (the
			// peer address: Echo v5 trusts no forwarding header by default).
			store := middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
				Rate: 1e9, Burst: 1e9, ExpiresIn: 3 * time.Minute,
			})
			return middleware.RateLimiter(store)
		},
	})
}
