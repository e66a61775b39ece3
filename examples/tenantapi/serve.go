package tenantapi

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
	"github.com/quotagate/quotagate/examples/internal/redisflag"
)

// Server serves an API's routes on a router: an *http.Server (net/http,
// Gin, Echo) or an adapter around a Fiber app. The mains give it the
// timeouts and header limit every example's server has (package
// examples/internal/serve; a Fiber app is served by fibermw.Serve), so
// that a client that sends slowly, or never, gets an answer and cannot
// hold a connection.
type Server interface {
	// Serve accepts connections on ln until Shutdown.
	Serve(ln net.Listener) error
	// Shutdown stops accepting connections and waits for the requests in
	// flight, until ctx ends.
	Shutdown(ctx context.Context) error
}

// RedisPrefix starts every Redis key of the example.
const RedisPrefix = "tenantapi:"

// RedisTimeout bounds every Redis call of the limiter unless
// -redis-timeout says otherwise. Past it the request fails open: it passes,
// and the error is logged. The library's default is 50 ms; the example
// allows more, so that a busy development machine does not let requests
// through uncounted.
const RedisTimeout = 200 * time.Millisecond

// MaxRedisTimeout is the largest -redis-timeout accepted.
const MaxRedisTimeout = 10 * time.Second

// Main runs a Tenant API server built by build and exits with [Run]'s
// status. It is the whole main function of each router's example.
func Main(build func(*API) (Server, error)) {
	os.Exit(Run(context.Background(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, build))
}

// Run runs a Tenant API server and returns the process's exit status:
//
//   - flags: -addr (default 127.0.0.1:8080), -redis (a Redis server's
//     host:port, a redis:// or rediss:// URL, or a Redis Cluster's nodes,
//     comma-separated; empty for the memory store; see -h) and
//     -redis-timeout (the deadline of each Redis call, default
//     RedisTimeout);
//   - the environment is read with env (see [New]); an invalid value
//     stops start-up with status 1 and a message on stderr;
//   - once the server accepts connections, Run writes exactly one line,
//     "listening on HOST:PORT", to stdout; everything else (logs, errors)
//     goes to stderr;
//   - SIGINT or SIGTERM (or ctx ending) shuts the server down cleanly,
//     and Run returns 0.
func Run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer, build func(*API) (Server, error)) int {
	fs := flag.NewFlagSet("tenantapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "`host:port` to listen on")
	redisAddr := fs.String("redis", "", redisflag.Usage)
	redisTimeout := fs.Duration("redis-timeout", RedisTimeout, "`deadline` of each Redis call; a request whose call takes longer passes unlimited (fail-open), so allow for a loaded machine (at most 10s)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(status int, err error) int {
		fmt.Fprintf(stderr, "tenantapi: %v\n", err)
		return status
	}
	if fs.NArg() > 0 {
		return fail(2, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *redisTimeout <= 0 || *redisTimeout > MaxRedisTimeout {
		return fail(2, fmt.Errorf("-redis-timeout %v: must be more than 0 and at most %v", *redisTimeout, MaxRedisTimeout))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	store, closeStore, err := openStore(ctx, *redisAddr, *redisTimeout, log)
	if err != nil {
		return fail(2, err)
	}
	defer closeStore()
	api, err := New(Config{Store: store, Env: env, Log: log})
	if err != nil {
		return fail(1, err)
	}
	srv, err := build(api)
	if err != nil {
		return fail(1, err)
	}
	if *redisAddr == "" {
		log.Info("tenantapi budgets in memory")
	} else {
		spec, _ := redisstore.ParseAddr(*redisAddr) // parsed by openStore
		log.Info("tenantapi budgets in Redis", "redis", spec.String(), "prefix", RedisPrefix, "timeout", *redisTimeout)
	}

	// Signals are caught before the listening line: whoever reads it may
	// send SIGTERM at once.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(1, err)
	}
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fail(1, fmt.Errorf("serving: %w", err))
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fail(1, fmt.Errorf("shutting down: %w", err))
	}
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fail(1, fmt.Errorf("serving: %w", err))
		}
	case <-shutdownCtx.Done():
		return fail(1, errors.New("shutting down: the server did not stop"))
	}
	api.Logger().Flush()
	log.Info("tenantapi stopped")
	return 0
}

// openStore returns the memory store, or a Redis store when spec is set.
func openStore(ctx context.Context, spec string, timeout time.Duration, log *slog.Logger) (core.Store, func(), error) {
	if spec == "" {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = s.Close() }, nil
	}
	rs, err := redisstore.ParseAddr(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis %s: %w", redisstore.QuoteAddr(spec), err)
	}
	s, client, err := rs.Open(redisstore.Config{Prefix: RedisPrefix, Timeout: timeout, Lazy: true})
	if err != nil {
		return nil, nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		// Not fatal: the limiter fails open until Redis answers.
		log.Warn("tenantapi cannot reach Redis yet; requests pass unlimited until it answers", "redis", rs.String(), "error", err)
	}
	return s, func() { _ = client.Close() }, nil
}
