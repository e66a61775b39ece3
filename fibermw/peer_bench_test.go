//go:build peerbench

// Fiber's own limiter, measured next to quotagate by BenchmarkMiddleware.
// Its package (github.com/gofiber/fiber/v2/middleware/limiter) needs
// github.com/tinylib/msgp, which this module does not require, so the file
// is built only with -tags peerbench and a module file that adds it:
//
//	cp go.mod /tmp/peer.mod && cp go.sum /tmp/peer.sum
//	go mod edit -modfile=/tmp/peer.mod -require=github.com/tinylib/msgp@v1.2.5
//	go test -modfile=/tmp/peer.mod -mod=mod -tags peerbench -run '^$' \
//	    -bench BenchmarkMiddleware -benchtime=200ms -benchmem ./fibermw/

package fibermw_test

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/limiter"
)

func init() {
	peers = append(peers, benchPeer{
		name: "fiber-limiter",
		mw: func(b *testing.B) fiber.Handler {
			// Fixed window, in-process memory storage, keyed by c.IP(); a
			// limit the benchmark never reaches.
			return limiter.New(limiter.Config{Max: 1e9, Expiration: time.Hour})
		},
	})
}
