package benchpeers

import (
	"context"
	"crypto/sha1"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/redisstore"
)

// CheckFunc is one decision for key against Redis.
type CheckFunc func(ctx context.Context, key string) (allowed bool, err error)

// Redis is a Redis-backed contender.
type Redis struct {
	Name string
	// Floor marks the floor row: one EVALSHA of a minimal INCRBY +
	// PEXPIRE script, no limiter. It always allows.
	Floor bool
	// Refills marks a GCRA limiter, which grants what refilled while a
	// trial ran on top of the quota.
	Refills bool
	// New builds a limiter of quota per window per key on rdb, a client
	// of one server or of a cluster.
	New func(rdb redis.UniversalClient, quota int64, window time.Duration) (check CheckFunc, close func(), err error)
}

// FloorScript is the floor row's script: the least a counter costs.
const FloorScript = `redis.call('INCRBY', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], 60000)
return 1`

// RedisContenders lists the Redis contenders, quotagate first, the floor last.
func RedisContenders() []Redis {
	return []Redis{
		{
			// quotagate's Redis store with its defaults (batching on, 50 ms
			// timeout), one fixed-window budget per Take.
			Name: "quotagate",
			New: func(rdb redis.UniversalClient, quota int64, window time.Duration) (CheckFunc, func(), error) {
				s, err := redisstore.New(rdb, redisstore.Config{})
				if err != nil {
					return nil, nil, err
				}
				l := core.Limit{Algorithm: core.FixedWindow, Quota: quota, Window: window}
				return func(ctx context.Context, key string) (bool, error) {
					items := [1]core.Item{{Budget: "b", Key: key, Limit: l, Cost: 1}}
					var out [1]core.Outcome
					if err := s.Take(ctx, items[:], out[:]); err != nil {
						return false, err
					}
					return out[0].Allowed, nil
				}, func() { _ = s.Close() }, nil
			},
		},
		{
			// ulule/limiter's Redis store: fixed window, one script per check.
			Name: "ulule",
			New: func(rdb redis.UniversalClient, quota int64, window time.Duration) (CheckFunc, func(), error) {
				// The store loads its scripts once (and again on NOSCRIPT)
				// through rdb, which on a Ring reaches one shard: a store
				// made on each shard's own client loads them on every one.
				if _, ok := rdb.(*redis.Ring); ok {
					if err := eachServer(rdb, func(_ context.Context, c redis.UniversalClient) error {
						_, err := ululeredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule"})
						return err
					}); err != nil {
						return nil, nil, err
					}
				}
				st, err := ululeredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
				if err != nil {
					return nil, nil, err
				}
				lim := limiter.New(st, limiter.Rate{Period: window, Limit: quota})
				return func(ctx context.Context, key string) (bool, error) {
					c, err := lim.Get(ctx, key)
					if err != nil {
						return false, err
					}
					return !c.Reached, nil
				}, nil, nil
			},
		},
		{
			// go-redis/redis_rate: GCRA in one script, burst = quota.
			Name:    "redis_rate",
			Refills: true,
			New: func(rdb redis.UniversalClient, quota int64, window time.Duration) (CheckFunc, func(), error) {
				l := redis_rate.NewLimiter(rdb)
				lim := redis_rate.Limit{Rate: int(quota), Burst: int(quota), Period: window}
				return func(ctx context.Context, key string) (bool, error) {
					res, err := l.Allow(ctx, key, lim)
					if err != nil {
						return false, err
					}
					return res.Allowed > 0, nil
				}, nil, nil
			},
		},
		{
			Name:  "floor",
			Floor: true,
			New: func(rdb redis.UniversalClient, quota int64, window time.Duration) (CheckFunc, func(), error) {
				// On every server (a Ring sends SCRIPT LOAD to one shard),
				// which may run fn concurrently; the SHA is the script's.
				if err := eachServer(rdb, func(ctx context.Context, c redis.UniversalClient) error {
					return c.ScriptLoad(ctx, FloorScript).Err()
				}); err != nil {
					return nil, nil, err
				}
				sha := fmt.Sprintf("%x", sha1.Sum([]byte(FloorScript)))
				return func(ctx context.Context, key string) (bool, error) {
					return true, rdb.EvalSha(ctx, sha, []string{"floor:" + key}).Err()
				}, nil, nil
			},
		},
	}
}

// eachServer runs fn on rdb, or on each master's client when rdb is a
// cluster client, or on each shard's when it is a Ring.
func eachServer(rdb redis.UniversalClient, fn func(ctx context.Context, c redis.UniversalClient) error) error {
	ctx := context.Background()
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	}
	return fn(ctx, rdb)
}

// NewRingClient is NewClient for a go-redis Ring of the servers at
// addrs (shards "s0", "s1", ...): the same pool for each shard.
func NewRingClient(addrs []string) *redis.Ring {
	shards := make(map[string]string, len(addrs))
	for i, a := range addrs {
		shards["s"+strconv.Itoa(i)] = a
	}
	return redis.NewRing(&redis.RingOptions{
		Addrs:                 shards,
		PoolSize:              128,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
}

// NewClient is the client every contender gets: one pool larger than the
// highest concurrency measured, and context deadlines applied to sockets
// (which quotagate's store asks for).
func NewClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              128,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
}

// NewClusterClient is NewClient for a cluster: the same pool for each
// master, and the slot map read before the first decision.
func NewClusterClient(addrs []string) (*redis.ClusterClient, error) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 addrs,
		PoolSize:              128,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		_ = cc.Close()
		return nil, err
	}
	return cc, nil
}

// Server is a redis-server this process started.
type Server struct {
	Addr string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server on a free 127.0.0.1 port, without
// persistence, and waits until it answers.
func StartRedis() (*Server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server and waits for it.
func (s *Server) Stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
