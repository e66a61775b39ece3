// Command quickstart is a net/http server limited by quotagate with the
// memory store: every route spends a per-client-IP budget, and POST /items
// also spends a stricter write budget.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -addr 127.0.0.1:9090
//
// The inspection page (/debug/quotagate) is served on a listener of its
// own, on a loopback address (-debug-addr), as pprof usually is: a
// reverse proxy in front of the API cannot reach it.
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/inspect"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	debugAddr := flag.String("debug-addr", "127.0.0.1:0", "address of the inspection page's own listener, a loopback one (the page answers loopback clients only; port 0: any free port)")
	flag.Parse()
	if err := run(*addr, *debugAddr, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// newHandler builds the quickstart's routes and budgets on store, and the
// inspection page's handler, to be served on a loopback listener of its
// own.
func newHandler(store core.Store) (api, debug http.Handler, err error) {
	// The client IP is the connection's peer. Behind a reverse proxy, use
	// keyfunc.IP with the proxy's address in TrustedProxies instead.
	peerIP := keyfunc.PeerIP()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{Budgets: []string{"per_ip", "writes"}})
	if err != nil {
		return nil, nil, err
	}
	logs, err := observe.NewLogger(nil, observe.LoggerConfig{}) // slog.Default()
	if err != nil {
		return nil, nil, err
	}
	recent := inspect.NewRecent(0) // recent denials for /debug/quotagate
	eng, err := core.New(core.Config{
		Store:    store,
		Observer: observe.Multi(m, logs, recent),
		Budgets: []core.Budget{
			// Every route: 60 requests per minute per client IP.
			{Name: "per_ip", Algorithm: core.FixedWindow, Quota: 60, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
			// POST /items: 10 writes per minute per client IP.
			{Name: "writes", Algorithm: core.FixedWindow, Quota: 10, Window: time.Minute, Key: peerIP, KeyClass: "ip"},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	if err := m.WatchEngine("quickstart", eng); err != nil {
		return nil, nil, err
	}
	if ms, ok := store.(*memstore.Store); ok {
		if err := m.WatchMemoryStore("memory", ms); err != nil {
			return nil, nil, err
		}
	}
	everyRoute, err := nethttp.Middleware(eng, core.Use("per_ip"))
	if err != nil {
		return nil, nil, err
	}
	writes, err := nethttp.Middleware(eng, core.Use("writes"))
	if err != nil {
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"hello":"world"}`+"\n")
	})
	mux.Handle("POST /items", writes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"created":true}`+"\n")
	})))
	top := http.NewServeMux()
	top.Handle("GET /metrics", metrics.Handler(reg)) // not rate-limited
	top.Handle("/", everyRoute(mux))
	// The inspection page shows keys and budgets: on its own loopback
	// listener, for loopback clients that name a loopback Host.
	dbg := http.NewServeMux()
	dbg.Handle("/debug/quotagate", inspect.MustNew(inspect.Config{Engine: eng, Recent: recent, Authorize: inspect.Loopback}))
	return top, dbg, nil
}

func run(addr, debugAddr string, out io.Writer) error {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close()
	h, debug, err := newHandler(store)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	dln, err := net.Listen("tcp", debugAddr)
	if err != nil {
		ln.Close()
		return err
	}
	dsrv := serve.HTTPServer(debug)
	// Bound how long a slow (or silent) client may hold a connection, and
	// the size of a request's header, as every example does (see package
	// serve for the values, and why WriteTimeout ends after ReadTimeout).
	srv := serve.HTTPServer(h)
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "listening on %s\n", ln.Addr())
	fmt.Fprintf(out, "try:\n")
	fmt.Fprintf(out, "  curl -i %s/hello\n", base)
	fmt.Fprintf(out, "  curl -i -X POST %s/items\n", base)
	fmt.Fprintf(out, "  for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\\n' -X POST %s/items; done\n", base)
	fmt.Fprintf(out, "inspection page (loopback only): http://%s/debug/quotagate\n", dln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	go func() { _ = dsrv.Serve(dln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = dsrv.Shutdown(shutdown)
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
