// Command echov5 is the quotagate quickstart for Echo v5: a server limited with
// the memory store, where every route spends a per-client-IP budget and
// POST /items also spends a stricter write budget. Prometheus metrics are
// served at /metrics (skipped by the limit), and denials are logged.
//
//	go run ./examples/echov5
//	go run ./examples/echov5 -addr 127.0.0.1:9090
//
// The budgets and routes are those of examples/quickstart (net/http) and
// examples/echo (Echo v4), so the responses are the same.
package main

import (
	"context"
	"errors"
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

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/keyfunc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	if err := run(*addr, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// newServer builds the example's routes and budgets on store.
func newServer(store core.Store) (*echo.Echo, error) {
	// The client IP is the connection's peer. Behind a reverse proxy, use
	// keyfunc.IP with the proxy's address in TrustedProxies instead.
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
	everyRoute, err := echov5.Middleware(eng, core.Use("per_ip"),
		echov5.Skipper(func(c *echo.Context) bool { return c.Path() == "/metrics" }))
	if err != nil {
		return nil, err
	}
	writes, err := echov5.Middleware(eng, core.Use("writes"))
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.Use(everyRoute)
	e.GET("/metrics", echo.WrapHandler(metrics.Handler(reg)))
	e.GET("/hello", func(c *echo.Context) error {
		return c.Blob(http.StatusOK, "application/json", []byte(`{"hello":"world"}`+"\n"))
	})
	e.POST("/items", func(c *echo.Context) error {
		return c.Blob(http.StatusCreated, "application/json", []byte(`{"created":true}`+"\n"))
	}, writes)
	return e, nil
}

func run(addr string, out io.Writer) error {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close()
	e, err := newServer(store)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// Bound how long a slow (or silent) client may hold a connection, and
	// the size of a request's header, as every example does (see package
	// serve for the values, and why WriteTimeout ends after ReadTimeout).
	srv := serve.HTTPServer(e)
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "listening on %s\n", ln.Addr())
	fmt.Fprintf(out, "try:\n")
	fmt.Fprintf(out, "  curl -i %s/hello\n", base)
	fmt.Fprintf(out, "  curl -i -X POST %s/items\n", base)
	fmt.Fprintf(out, "  for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\\n' -X POST %s/items; done\n", base)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
