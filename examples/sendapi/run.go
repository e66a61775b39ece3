package sendapi

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/redisstore"
)

// Server is a router's HTTP server, built by a command around an App.
// *http.Server implements it; a Fiber app needs a small wrapper. The
// commands give it the timeouts and header limit every example's server
// has (package examples/internal/serve; a Fiber app is served by
// fibermw.Serve), so that a client that sends slowly, or never, gets an
// answer and cannot hold a connection.
type Server interface {
	// Serve accepts connections on ln until Shutdown.
	Serve(ln net.Listener) error
	// Shutdown stops accepting connections and waits, within ctx, for
	// the requests in progress.
	Shutdown(ctx context.Context) error
}

// RedisPrefix starts the Redis keys of the example's budgets.
const RedisPrefix = "sendapi:rl:"

// ShutdownTimeout bounds the wait for requests in progress at shutdown.
const ShutdownTimeout = 10 * time.Second

// Main runs a Send API command built by build, with the process's
// arguments, environment and standard streams, until SIGINT or SIGTERM,
// and returns the exit status: 0 after a clean shutdown, 2 for an invalid
// configuration, 1 for any other failure.
//
//	func main() { os.Exit(sendapi.Main("sendapi-nethttp", newServer)) }
func Main(name string, build func(*App) (Server, error)) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, name, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, build)
}

// Run is Main with its inputs explicit: it serves until ctx ends. Its only
// line on stdout is "listening on HOST:PORT", printed once the listener is
// open; logs (text, via log/slog) and errors go to stderr.
func Run(ctx context.Context, name string, args []string, env func(string) (string, bool), stdout, stderr io.Writer, build func(*App) (Server, error)) int {
	cfg, err := LoadConfig(name, args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration:\n%v\n", name, indent(err))
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}

	st, err := openStores(ctx, cfg, log)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	app, err := New(cfg, Deps{Store: st.store, Idempotency: st.idem, Logger: log})
	if err != nil {
		return fail(err)
	}
	defer app.FlushLogs()
	srv, err := build(app)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fail(fmt.Errorf("serving: %w", err))
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fail(fmt.Errorf("shutting down: %w", err))
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(fmt.Errorf("serving: %w", err))
	}
	log.Info("sendapi: stopped", "event", "shutdown")
	return 0
}

// indent puts a tab before every line of err.
func indent(err error) string {
	out := []byte{'\t'}
	for _, c := range []byte(err.Error()) {
		out = append(out, c)
		if c == '\n' {
			out = append(out, '\t')
		}
	}
	return string(out)
}

type stores struct {
	store core.Store
	idem  IdempotencyStore
	close func()
}

// openStores returns the memory stores, or the Redis stores of cfg.Redis.
// An unreachable Redis does not stop start-up: the budgets fail open (and
// idempotent sends answer 503) until it answers.
func openStores(ctx context.Context, cfg Config, log *slog.Logger) (stores, error) {
	if cfg.Redis == "" {
		ms, err := memstore.New(memstore.Config{})
		if err != nil {
			return stores{}, err
		}
		return stores{store: ms, idem: NewMemoryIdempotency(0), close: func() { ms.Close() }}, nil
	}
	spec, err := redisstore.ParseAddr(cfg.Redis)
	if err != nil {
		return stores{}, fmt.Errorf("-redis %s: %w", redisstore.QuoteAddr(cfg.Redis), err)
	}
	// The store's deadline (REDIS_TIMEOUT) bounds every call, so a Redis
	// that hangs costs each request at most that before the request
	// passes unlimited.
	rs, client, err := spec.Open(redisstore.Config{Prefix: RedisPrefix, Timeout: cfg.RedisTimeout, Lazy: true})
	if err != nil {
		return stores{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rs.Preload(pctx); err != nil {
		log.Warn("sendapi: Redis is not answering; requests pass unlimited until it does",
			"event", "store_unavailable", "redis", spec.String(), "error", err)
	}
	return stores{store: rs, idem: NewRedisIdempotency(client, ""), close: func() { client.Close() }}, nil
}
