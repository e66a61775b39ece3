// Command fiberv3 is the quotagate quickstart for Fiber v3: a server limited
// with the memory store, where every route spends a per-client-IP budget
// and POST /items also spends a stricter write budget. GET /metrics serves
// the Prometheus metrics, and denials are logged (slog.Default()).
//
//	go run ./examples/fiberv3
//	go run ./examples/fiberv3 -addr 127.0.0.1:9090
//
// The budgets and routes are those of examples/quickstart (net/http), so
// the responses are the same.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/keyfunc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	if err := run(*addr, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// newApp builds the example's routes and budgets on store.
func newApp(store core.Store) (*fiber.App, error) {
	// The client IP is the connection's peer (fiberv3 passes the socket
	// address, copied out of fasthttp's buffers). Behind a reverse proxy,
	// use keyfunc.IP with the proxy's address in TrustedProxies instead
	// (never c.IP(), which believes the proxy header Fiber is configured
	// with).
	peerIP := keyfunc.PeerIP()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{Budgets: []string{"per_ip", "writes"}})
	if err != nil {
		return nil, err
	}
	logs, err := observe.NewLogger(nil, observe.LoggerConfig{}) // slog.Default()
	if err != nil {
		return nil, err
	}
	eng, err := core.New(core.Config{
		Store:    store,
		Observer: observe.Multi(m, logs), // metrics, and denials in the log
		Budgets: []core.Budget{
			// Every route: 60 requests per minute per client IP.
			{Name: "per_ip", Quota: 60, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
			// POST /items: 10 writes per minute per client IP.
			{Name: "writes", Quota: 10, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
		},
	})
	if err != nil {
		return nil, err
	}
	if err := m.WatchEngine("quickstart", eng); err != nil {
		return nil, err
	}
	if ms, ok := store.(*memstore.Store); ok {
		if err := m.WatchMemoryStore("memory", ms); err != nil {
			return nil, err
		}
	}
	// Every route but /metrics.
	everyRoute, err := fiberv3.Middleware(eng, core.Use("per_ip"),
		fiberv3.Next(func(c fiber.Ctx) bool { return c.Path() == "/metrics" }))
	if err != nil {
		return nil, err
	}
	writes, err := fiberv3.Middleware(eng, core.Use("writes"))
	if err != nil {
		return nil, err
	}

	app := fiber.New(fiber.Config{
		// Bound how long a slow (or silent) client may hold a connection,
		// and the size of a request's header, as every example does (see
		// package serve). fasthttp has no header timeout: ReadTimeout
		// covers the header and the body. It reads a request's whole
		// header into ReadBufferSize (default 4 KiB) and answers 431 to a
		// larger one.
		ReadTimeout:    serve.ReadTimeout,
		WriteTimeout:   serve.WriteTimeout,
		IdleTimeout:    serve.IdleTimeout,
		ReadBufferSize: serve.MaxHeaderBytes,
	})
	app.Use(recover.New(), everyRoute)
	app.Get("/metrics", adaptor.HTTPHandler(metrics.Handler(reg)))
	app.Get("/hello", func(c fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "application/json")
		return c.Status(http.StatusOK).SendString(`{"hello":"world"}` + "\n")
	})
	app.Post("/items", writes, func(c fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "application/json")
		return c.Status(http.StatusCreated).SendString(`{"created":true}` + "\n")
	})
	return app, nil
}

func run(addr string, out io.Writer) error {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close()
	app, err := newApp(store)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "listening on %s\n", ln.Addr())
	fmt.Fprintf(out, "try:\n")
	fmt.Fprintf(out, "  curl -i %s/hello\n", base)
	fmt.Fprintf(out, "  curl -i -X POST %s/items\n", base)
	fmt.Fprintf(out, "  for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\\n' -X POST %s/items; done\n", base)
	fmt.Fprintf(out, "  curl -s %s/metrics | grep quotagate_\n", base)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	// fiberv3.Serve is app.Listener with what fasthttp lacks to answer
	// every request: error answers (408, 431) under a write deadline of
	// their own, and connections that close after the client has read the
	// answer.
	go func() {
		errc <- fiberv3.Serve(app, ln, fiber.ListenConfig{DisableStartupMessage: true})
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
		return err
	}
	return <-errc
}
