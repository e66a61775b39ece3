// Fiber v3's own limiter, measured next to quotagate by BenchmarkMiddleware.
// Unlike Fiber v2's, its package builds with this module's requirements
// (github.com/tinylib/msgp is already required), so no build tag is needed.

package fiberv3_test

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/limiter"
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
