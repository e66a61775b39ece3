package benchpeers

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// The benchmarks' names are what cmd/tables reads:
//
//	BenchmarkInMem/row=<row>/c=<contender>
//	BenchmarkMiddleware/router=<router>/mode=<serial|parallel>/c=<contender>
//	BenchmarkRedis/keys=<n>/g=<goroutines>/c=<contender>
//	BenchmarkRedisDelayed/delay=<µs>us/keys=<n>/g=<goroutines>/c=<contender>
//	BenchmarkRedisCluster/keys=<n>/g=<goroutines>/c=<contender>
//
// Within a row every contender runs once, one after the other, so that a
// pass of `go test -bench -count 1` measures every contender of a row
// before the next pass starts (run.sh runs COUNT passes). run.sh numbers
// the passes (BENCHPEERS_PASS=1, 2, ...) and each pass starts a row one
// contender further on, so that no contender is always the first measured
// after a row starts.

// inPassOrder returns cs rotated by the pass number less one.
func inPassOrder[T any](cs []T) []T {
	if len(cs) == 0 {
		return cs
	}
	k := (envInt("BENCHPEERS_PASS", 1) - 1) % len(cs)
	return append(cs[k:len(cs):len(cs)], cs[:k]...)
}

// BenchmarkInMem measures one in-memory decision (ns/op), every call
// allowed: one key serially, one key from b.RunParallel goroutines, and
// 100,000 keys visited round-robin from b.RunParallel goroutines (every key
// inserted before the timer starts).
func BenchmarkInMem(b *testing.B) {
	keys := makeKeys(manyKeys, "198.")
	for _, row := range []string{"one-key-serial", "one-key-parallel", "100k-keys-parallel"} {
		many := row == "100k-keys-parallel"
		b.Run("row="+row, func(b *testing.B) {
			for _, c := range inPassOrder(InMemContenders()) {
				if c.OneKeyOnly && many {
					continue
				}
				var worker func() AllowFunc
				var closeFn func()
				b.Run("c="+c.Name, func(b *testing.B) {
					if worker == nil { // once per contender, kept across b.N rounds
						n := 1
						if many {
							n = manyKeys
						}
						worker, closeFn = c.New(hotQuota, hotWindow, n)
						if many {
							allow := worker()
							for _, k := range keys {
								allow(k)
							}
						}
					}
					var denied atomic.Int64
					b.ReportAllocs()
					b.ResetTimer()
					switch {
					case row == "one-key-serial":
						allow := worker()
						for range b.N {
							if !allow("203.0.113.9") {
								denied.Add(1)
							}
						}
					case !many:
						b.RunParallel(func(pb *testing.PB) {
							allow := worker()
							for pb.Next() {
								if !allow("203.0.113.9") {
									denied.Add(1)
								}
							}
						})
					default:
						var start atomic.Int64
						b.RunParallel(func(pb *testing.PB) {
							allow := worker()
							i := int(start.Add(7919)) % len(keys)
							for pb.Next() {
								if !allow(keys[i]) {
									denied.Add(1)
								}
								if i++; i == len(keys) {
									i = 0
								}
							}
						})
					}
					b.StopTimer()
					// A call not granted under this limit is a limiter's error:
					// throttled's compare-and-swap gives up after 10 retries on a
					// contended key, a few percent of its calls on a busy
					// machine. Reported (refused/op, shown in the table), and
					// fatal above half, where the row would no longer measure
					// decisions (wiring_test.go checks that each limiter grants
					// what it should).
					d := denied.Load()
					b.ReportMetric(float64(d)/float64(b.N), "refused/op")
					if b.N >= 1000 && d*2 > int64(b.N) {
						b.Fatalf("%s refused %d of %d calls under a limit no run reaches", c.Name, d, b.N)
					}
				})
				if closeFn != nil {
					closeFn()
				}
			}
		})
	}
}

// BenchmarkMiddleware measures one in-process request (ns/op, allocs/op)
// through each router, bare and behind each contender, serially and from
// b.RunParallel goroutines; cmd/tables subtracts the bare router.
func BenchmarkMiddleware(b *testing.B) {
	for _, r := range Routers() {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run("router="+r.Name+"/mode="+mode, func(b *testing.B) {
				for _, c := range inPassOrder(r.Contenders) {
					var worker func() func() int
					b.Run("c="+c.Name, func(b *testing.B) {
						if worker == nil {
							worker = c.New(hotQuota, hotWindow)
						}
						runHTTP(b, mode == "parallel", worker)
					})
				}
			})
		}
	}
}

func runHTTP(b *testing.B, parallel bool, worker func() func() int) {
	var bad atomic.Int64
	b.ReportAllocs()
	if parallel {
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			serve := worker()
			for pb.Next() {
				if serve() != http.StatusOK {
					bad.Add(1)
				}
			}
		})
	} else {
		serve := worker()
		b.ResetTimer()
		for range b.N {
			if serve() != http.StatusOK {
				bad.Add(1)
			}
		}
	}
	b.StopTimer()
	if n := bad.Load(); b.N >= 1000 && n*100 > int64(b.N) {
		b.Fatalf("%d of %d requests were not 200 under a limit no run reaches", n, b.N)
	}
}

// BenchmarkRedis measures decisions per second for one budget against this
// process's redis-server: one key or 10,000 keys round-robin, from 1, 8 or
// 64 goroutines sharing one client, which pull the b.N decisions from one
// counter. The database is flushed before each contender. Each row also
// reports the median and 99th percentile of a decision's latency.
func BenchmarkRedis(b *testing.B) {
	benchRedis(b, redisClient(b, 64))
}

// BenchmarkRedisDelayed measures the rows of BenchmarkRedis through a
// Proxy that holds each direction for 100 µs or 500 µs: a network between
// the client and Redis. Its rows report the time the proxy really held a
// chunk (held-µs), a little more than the delay.
func BenchmarkRedisDelayed(b *testing.B) {
	addr := redisAddr(b)
	for _, delay := range []time.Duration{100 * time.Microsecond, 500 * time.Microsecond} {
		b.Run("delay="+strconv.Itoa(int(delay/time.Microsecond))+"us", func(b *testing.B) {
			p, err := StartProxy(addr, delay)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			rdb := NewClient(p.Addr)
			defer rdb.Close()
			warm(b, rdb, 64)
			benchRedis(b, rdb)
			b.Logf("proxy held each chunk %v on average", p.Held())
		})
	}
}

// BenchmarkRedisCluster measures the rows of BenchmarkRedis against a
// Redis Cluster of three masters without replicas, started for it on free
// 127.0.0.1 ports, through one cluster client: the keys spread over the
// masters by hash slot.
func BenchmarkRedisCluster(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	cc, err := NewClusterClient(cl.Addrs())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	warm(b, cc, 64)
	benchRedis(b, cc)
}

// BenchmarkRedisRing measures the rows of BenchmarkRedis against a
// go-redis Ring of three servers, started for it on free 127.0.0.1
// ports: the keys spread over the shards by hash. It is not part of
// run.sh's tables; run it on its own:
//
//	GOWORK=off go test -run '^$' -bench '^BenchmarkRedisRing$' -benchtime 1s .
func BenchmarkRedisRing(b *testing.B) {
	ring := startRing(b, 3)
	warm(b, ring, 64)
	benchRedis(b, ring)
}

func benchRedis(b *testing.B, rdb redis.UniversalClient) {
	for _, nkeys := range []int{1, redisKeys} {
		keys := makeKeys(nkeys, "10.")
		for _, g := range []int{1, 8, 64} {
			b.Run("keys="+strconv.Itoa(nkeys)+"/g="+strconv.Itoa(g), func(b *testing.B) {
				for _, c := range inPassOrder(RedisContenders()) {
					var check CheckFunc
					var closeFn func()
					b.Run("c="+c.Name, func(b *testing.B) {
						if check == nil {
							flush(b, rdb)
							var err error
							if check, closeFn, err = c.New(rdb, hotQuota, hotWindow); err != nil {
								b.Fatal(err)
							}
						}
						runRedis(b, g, keys, check)
					})
					if closeFn != nil {
						closeFn()
					}
				}
			})
		}
	}
}

func runRedis(b *testing.B, g int, keys []string, check CheckFunc) {
	g = min(g, b.N)
	ctx := context.Background()
	var next, errs, denied atomic.Int64
	var wg sync.WaitGroup
	lat := make([][]time.Duration, g) // each goroutine's decision latencies
	for w := range lat {
		lat[w] = make([]time.Duration, 0, b.N/g+1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				ok, err := check(ctx, keys[int(i%int64(len(keys)))])
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					errs.Add(1)
				} else if !ok {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(percentile(all, 0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(all, 0.99))/1e3, "p99-µs")
	// Errors (a store's own timeout on a stalled server) are reported
	// (errors/op, shown in the table); a denial under this limit, or errors
	// above 5%, fail the row.
	b.ReportMetric(float64(errs.Load())/float64(b.N), "errors/op")
	if e, d := errs.Load(), denied.Load(); d > 0 || (b.N >= 100 && e*20 > int64(b.N)) {
		b.Fatalf("%d errors and %d denials in %d decisions under a limit no run reaches", e, d, b.N)
	}
}

// percentile returns the p-th quantile of sorted, or 0 when it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
