package benchpeers

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The benchmarks' limit, which no benchmark can exhaust: every decision
// takes the allow-and-charge path. A long window rather than a high rate,
// so that no limiter needs to refill during a run.
const (
	hotQuota  int64 = 1_000_000_000
	hotWindow       = time.Hour

	manyKeys  = 100_000 // in memory, many-keys row
	redisKeys = 10_000  // Redis, many-keys rows
)

var (
	redisOnce sync.Once
	redisSrv  *Server
	redisErr  error
)

// redisAddr starts this process's redis-server on first use. Without
// redis-server the caller is skipped, or fails when
// QUOTAGATE_REQUIRE_REDIS is set (as CI sets it).
func redisAddr(tb testing.TB) string {
	redisOnce.Do(func() { redisSrv, redisErr = StartRedis() })
	noRedis(tb, redisErr)
	return redisSrv.Addr
}

// noRedis skips the caller when err (from StartRedis) is not nil, or
// fails it when QUOTAGATE_REQUIRE_REDIS is set.
func noRedis(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("QUOTAGATE_REQUIRE_REDIS") != "" {
		tb.Fatalf("redis-server: %v", err)
	}
	tb.Skipf("redis-server: %v", err)
}

func TestMain(m *testing.M) {
	code := m.Run()
	redisSrv.Stop()
	os.Exit(code)
}

// redisClient returns a client of this process's server, its pool warmed
// with n connections so that dialling is not measured.
func redisClient(tb testing.TB, n int) *redis.Client {
	rdb := NewClient(redisAddr(tb))
	tb.Cleanup(func() { _ = rdb.Close() })
	warm(tb, rdb, n)
	return rdb
}

// warm opens n connections in rdb's pool (in each master's, for a cluster
// client).
func warm(tb testing.TB, rdb redis.UniversalClient, n int) {
	if err := eachServer(rdb, func(ctx context.Context, c redis.UniversalClient) error { return pings(ctx, c, n) }); err != nil {
		tb.Fatal(err)
	}
}

// startRing starts n redis-servers for the test and returns a Ring
// client of them (NewRingClient), closed at the test's end.
func startRing(tb testing.TB, n int) *redis.Ring {
	tb.Helper()
	var addrs []string
	for range n {
		srv, err := StartRedis()
		noRedis(tb, err)
		tb.Cleanup(srv.Stop)
		addrs = append(addrs, srv.Addr)
	}
	ring := NewRingClient(addrs)
	tb.Cleanup(func() { _ = ring.Close() })
	return ring
}

// pings sends n PINGs to rdb at once, so that its pool opens n connections.
func pings(ctx context.Context, rdb redis.UniversalClient, n int) error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flush empties rdb's database (every master's, for a cluster client).
func flush(tb testing.TB, rdb redis.UniversalClient) {
	if err := eachServer(rdb, func(ctx context.Context, c redis.UniversalClient) error { return c.FlushDB(ctx).Err() }); err != nil {
		tb.Fatal(err)
	}
}

func makeKeys(n int, prefix string) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i/65536) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256)
	}
	return keys
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
