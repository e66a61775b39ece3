package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// benchPartitions is how many distinct partitions the benchmarks spread
// decisions over.
const benchPartitions = 10_000

var benchKeys = func() []string {
	ks := make([]string, benchPartitions)
	for i := range ks {
		ks[i] = "client:" + strconv.Itoa(i)
	}
	return ks
}()

// runGoroutines runs b.N calls of fn spread over g goroutines and reports
// decisions per second, and the server's time per EVALSHA (from INFO
// commandstats), which does not depend on how loaded the client side is.
func runGoroutines(b *testing.B, client *redis.Client, g int, fn func(i int) error) {
	b.Helper()
	if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, srv0 := processCPU(), serverCPU(b, client)
	start := time.Now()
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := fn(int(i)); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	srv := serverCPU(b, client) - srv0
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	// CPU time per decision, of this process and of the server: on a
	// machine whose other work makes throughput noisy, what a decision
	// costs is steadier than how many fit in a second.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "client-cpu-µs/decision")
	b.ReportMetric(float64(srv.Microseconds())/float64(b.N), "server-cpu-µs/decision")
	calls, usec := scriptUsec(b, client)
	if calls > 0 {
		b.ReportMetric(float64(usec)/float64(calls), "server-µs/call")
		b.ReportMetric(float64(b.N)/float64(calls), "decisions/call")
		b.ReportMetric(float64(usec)/float64(b.N), "server-µs/decision")
	}
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time (user and system) the server has used,
// from INFO cpu.
func serverCPU(b testing.TB, client *redis.Client) time.Duration {
	info, err := client.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkRedis compares decisions through the Store (also with batching
// off, and watching a Sentinel for failovers) and through an Engine's
// Layer.Decide with the one-round-trip floor: a plain EVALSHA of
// a trivial script with the same client, at 1, 8 and 64 goroutines. The
// minimal-script rows run the least any limiter script does (TIME, GET,
// SET PX), which bounds what the store can reach.
//
//	go test -run '^$' -bench BenchmarkRedis -benchmem -benchtime=200ms ./core/redisstore/
func BenchmarkRedis(b *testing.B) {
	// A server under a Sentinel (no replica), for the watched rows; the
	// Sentinel's PINGs, INFOs and hellos reach every row alike.
	d := redistest.StartSentinel(b, "bench", 0)
	srv := d.Master
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	floorSHA, err := client.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		b.Fatal(err)
	}
	// The least a limiter script must do: read the server clock, read one
	// state and write it back with a TTL. No algorithm, fixed values.
	minimalSHA, err := client.ScriptLoad(ctx, `local t = redis.call('TIME')
local v = redis.pcall('GET', KEYS[1])
redis.call('SET', KEYS[1], struct.pack('<i8i8i8i8i8', 0, 3600000000, 1796040000000000, 5, 0), 'PX', 3600000)
return struct.pack('<i8i8i8i8i8i8i8', 1, 1, 1, 4, 5, 0, 0)`).Result()
	if err != nil {
		b.Fatal(err)
	}
	// A generous deadline: the benchmark measures throughput, and a loaded
	// machine must not turn slow calls into failures.
	st := mustStore(b, client, Config{Prefix: "bench:", Timeout: 2 * time.Second})
	if err := st.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	// The same store with batching off: one script run per Take.
	unbatched := mustStore(b, client, Config{Prefix: "bench:", Timeout: 2 * time.Second, MaxBatch: 1})
	// The same store watching the Sentinel for failovers.
	watched := mustStore(b, client, Config{Prefix: "bench:", Timeout: 2 * time.Second,
		Sentinel: &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: d.Name}})
	defer watched.Close()
	lim := core.Limit{Algorithm: core.FixedWindow, Quota: core.MaxQuota, Window: time.Hour}
	budgets := []core.Budget{
		{Name: "tenant", Quota: core.MaxQuota, Window: time.Hour, Key: benchKeyFunc},
		{Name: "ip", Algorithm: core.TokenBucket, Quota: 1_000_000, Window: time.Second, Burst: 1_000_000, Key: benchKeyFunc},
		{Name: "route", Algorithm: core.SlidingWindow, Quota: 1_000_000_000, Window: time.Minute, Key: benchKeyFunc},
	}
	eng, err := core.New(core.Config{Store: st, Budgets: budgets})
	if err != nil {
		b.Fatal(err)
	}
	layers := map[int]*core.Layer{
		1: eng.MustLayer(core.Use("tenant")),
		3: eng.MustLayer(core.Use("tenant", "ip", "route")),
	}

	for _, g := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("floor-evalsha/g=%d", g), func(b *testing.B) {
			runGoroutines(b, client, g, func(i int) error {
				return client.EvalSha(ctx, floorSHA, []string{benchKeys[i%benchPartitions]}).Err()
			})
		})
		b.Run(fmt.Sprintf("minimal-script/g=%d", g), func(b *testing.B) {
			runGoroutines(b, client, g, func(i int) error {
				return client.EvalSha(ctx, minimalSHA, []string{benchKeys[i%benchPartitions]}).Err()
			})
		})
		for _, n := range []int{1, 3} {
			for _, v := range []struct {
				name string
				st   *Store
			}{{"store", st}, {"unbatched", unbatched}, {"watched", watched}} {
				b.Run(fmt.Sprintf("%s-%dbudget/g=%d", v.name, n, g), func(b *testing.B) {
					names := []string{"tenant", "ip", "route"}
					runGoroutines(b, client, g, func(i int) error {
						var items [3]core.Item
						var out [3]core.Outcome
						for j := 0; j < n; j++ {
							items[j] = core.Item{Budget: names[j], Key: benchKeys[i%benchPartitions], Limit: lim, Cost: 1}
						}
						return v.st.Take(ctx, items[:n], out[:n])
					})
				})
			}
			b.Run(fmt.Sprintf("engine-%dbudget/g=%d", n, g), func(b *testing.B) {
				layer := layers[n]
				// Per-request state is pooled, as the adapters pool it.
				var pool sync.Pool
				runGoroutines(b, client, g, func(i int) error {
					st, _ := pool.Get().(*benchRequest)
					if st == nil {
						st = new(benchRequest)
					}
					defer pool.Put(st)
					st.req = core.Request{Method: "POST", Path: "/", RemoteAddr: benchKeys[i%benchPartitions], Context: ctx}
					d := &st.d
					d.Reset()
					layer.Decide(&st.req, d)
					if d.Err != nil {
						return d.Err
					}
					if !d.Allowed {
						return fmt.Errorf("denied by %s", d.DeniedBy)
					}
					return nil
				})
			})
		}
	}
}

func benchKeyFunc(r *core.Request) (string, error) { return r.RemoteAddr, nil }

// benchRequest is one request's state in the engine rows.
type benchRequest struct {
	req core.Request
	d   core.Decision
}
