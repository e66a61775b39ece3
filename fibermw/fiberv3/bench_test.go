package fiberv3_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/internal/benchengine"
	"github.com/quotagate/quotagate/internal/fastreq"
	"github.com/valyala/fasthttp"
)

func noop(fiber.Ctx) error { return nil }

// benchPeer is another limiter measured next to quotagate (see
// peer_bench_test.go).
type benchPeer struct {
	name string
	mw   func(b *testing.B) fiber.Handler
}

var peers []benchPeer

// BenchmarkMiddleware measures a Fiber v3 no-op route (GET /) with and
// without quotagate, serially, in process: app.Handler() called on one
// reused *fasthttp.RequestCtx (remote address 203.0.113.9:41000), whose
// response and user values are reset per request as fasthttp's server
// does. It also measures a request the layer's Next skips, and Fiber v3's
// own limiter (peer_bench_test.go).
func BenchmarkMiddleware(b *testing.B) {
	run := func(b *testing.B, app *fiber.App, wantHeader string) {
		handler := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod(http.MethodGet)
		req.SetRequestURI("http://127.0.0.1/")
		ctx := new(fasthttp.RequestCtx)
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 41000}, nil)
		b.ReportAllocs()
		for b.Loop() {
			ctx.Response.Reset()
			ctx.ResetUserValues()
			handler(ctx)
		}
		if ctx.Response.StatusCode() != http.StatusOK || (wantHeader != "" && len(ctx.Response.Header.Peek(wantHeader)) == 0) {
			b.Fatalf("last response: %s", ctx.Response.Header.String())
		}
	}
	b.Run("bare", func(b *testing.B) {
		app := fiber.New()
		app.Get("/", noop)
		run(b, app, "")
	})
	for _, s := range []struct {
		name   string
		style  core.HeaderStyle
		header string
	}{{"ietf", core.HeadersIETF, "RateLimit"}, {"x", core.HeadersX, "X-RateLimit-Limit"}, {"none", core.HeadersNone, ""}} {
		b.Run("quotagate/headers="+s.name, func(b *testing.B) {
			app := fiber.New()
			app.Use(fiberv3.MustMiddleware(benchengine.HotEngine(b, s.style), core.Use("per_ip")))
			app.Get("/", noop)
			run(b, app, s.header)
		})
	}
	b.Run("quotagate/stacked", func(b *testing.B) {
		eng := benchengine.HotEngine(b, core.HeadersIETF)
		app := fiber.New()
		g := app.Group("/", fiberv3.MustMiddleware(eng, core.Use("per_ip")))
		g.Get("/", fiberv3.MustMiddleware(eng, core.Use("writes")), noop)
		run(b, app, "RateLimit")
	})
	// Fiber's own cost of one more handler in the chain, which a skipped
	// request pays too: a middleware that only calls c.Next.
	b.Run("noop-middleware", func(b *testing.B) {
		app := fiber.New()
		app.Use(func(c fiber.Ctx) error { return c.Next() })
		app.Get("/", noop)
		run(b, app, "")
	})
	// The floor under the adapter (benchengine.Floor): a plain Fiber
	// middleware that asks a layer for a decision and nothing else, with
	// the request's method, path (not copied out of fasthttp's buffer) and
	// peer address as text (one allocation).
	b.Run(benchengine.FloorName(false), func(b *testing.B) {
		f := benchengine.NewFloor(b)
		app := fiber.New()
		app.Use(func(c fiber.Ctx) error {
			var buf [64]byte
			if !f.Allow(&core.Request{Method: c.Method(), Path: c.Path(),
				RemoteAddr: string(fastreq.AppendAddr(buf[:0], c.RequestCtx().RemoteAddr())), Context: c.Context()}) {
				return c.SendStatus(http.StatusTooManyRequests)
			}
			return c.Next()
		})
		app.Get("/", noop)
		run(b, app, "")
	})
	b.Run("quotagate/skipped", func(b *testing.B) {
		app := fiber.New()
		app.Use(fiberv3.MustMiddleware(benchengine.HotEngine(b, core.HeadersIETF), core.Use("per_ip"),
			fiberv3.Next(func(fiber.Ctx) bool { return true })))
		app.Get("/", noop)
		run(b, app, "")
	})
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			app := fiber.New()
			app.Use(p.mw(b))
			app.Get("/", noop)
			run(b, app, "")
		})
	}
}
