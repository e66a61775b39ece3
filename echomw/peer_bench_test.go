//go:build peerbench

// Echo's own rate limiter, measured next to quotagate by BenchmarkMiddleware.
// Its package (github.com/labstack/echo/v4/middleware) needs
// golang.org/x/time, which this module does not require, so the file is
// built only with -tags peerbench and a module file that adds it:
//
//	cp go.mod /tmp/peer.mod && cp go.sum /tmp/peer.sum
//	go mod edit -modfile=/tmp/peer.mod -require=golang.org/x/time@v0.15.0
//	go test -modfile=/tmp/peer.mod -mod=mod -tags peerbench -run '^$' \
//	    -bench BenchmarkMiddleware -benchtime=200ms -benchmem ./echomw/

package echomw_test

import (
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"
)

func init() {
	peers = append(peers, benchPeer{
		name: "echo-ratelimiter",
		mw: func(b *testing.B) echo.MiddlewareFunc {
			// A limit the benchmark never reaches, keyed by c.RealIP() (the
			// peer address: the request has no forwarding header).
			store := middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
				Rate: rate.Limit(1e9), Burst: 1e9, ExpiresIn: 3 * time.Minute,
			})
			return middleware.RateLimiter(store)
		},
	})
}
