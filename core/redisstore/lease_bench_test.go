package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLeaseHotKey measures one hot key spent by 4 engine instances in
// this process, each with its own client and store, 64 goroutines each,
// on one Redis (and on a 3-node Cluster): the one-round-trip floor (a
// plain EVALSHA of "return 1" from the same 4 × 64 goroutines), the
// budget without leasing, and the budget leased. A fixed window of 100 ms
// with a quota of 20,000 is far below what the goroutines ask, so every
// window runs out. Besides decisions/s it reports, for the store rows,
// over-windows (windows that admitted more than the quota: must be 0),
// worst-short-% (the largest shortfall below the quota among the
// windows after the first and before the last, in % of the quota),
// commands/decision (every command in INFO commandstats, those the
// scripts run included, per decision) and local-% (decisions served with
// no Redis call).
//
//	go test -run '^$' -bench BenchmarkLeaseHotKey -benchtime=3s ./core/redisstore/
func BenchmarkLeaseHotKey(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		srv := redistest.Start(b)
		benchHotKey(b, func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
		})
	})
	b.Run("cluster", func(b *testing.B) {
		c := redistest.StartCluster(b, 3)
		benchHotKey(b, func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, PoolSize: 64})
		})
	})
}

const (
	hotInstances  = 4
	hotGoroutines = 64
)

func benchHotKey(b *testing.B, newClient func() redis.UniversalClient) {
	ctx := context.Background()
	clients := make([]redis.UniversalClient, hotInstances)
	for i := range clients {
		clients[i] = newClient()
		defer clients[i].Close()
	}
	floorSHA, err := clients[0].ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range clients[1:] {
		if err := c.ScriptLoad(ctx, "return 1").Err(); err != nil {
			b.Fatal(err)
		}
	}
	const quota, window = 20_000, 100 * time.Millisecond
	b.Run("floor-evalsha", func(b *testing.B) {
		runHot(b, clients, func(inst, i int) (*core.Outcome, error) {
			return nil, clients[inst].EvalSha(ctx, floorSHA, []string{"hot"}).Err()
		})
	})
	for _, lease := range []core.Leasing{{}, {Max: 1000, TTL: 100 * time.Millisecond}} {
		name := "store-unleased"
		if lease.Enabled() {
			name = "store-leased"
		}
		b.Run(name, func(b *testing.B) {
			budget := core.Budget{Name: "hot", Quota: quota, Window: window, Key: benchKeyFunc, Leasing: lease}
			stores := make([]*Store, hotInstances)
			layers := make([]*core.Layer, hotInstances)
			for i := range stores {
				stores[i] = mustStore(b, clients[i], Config{Prefix: fmt.Sprintf("hot%d:", b.N), Timeout: 2 * time.Second})
				if err := stores[i].Preload(ctx); err != nil {
					b.Fatal(err)
				}
				eng, err := core.New(core.Config{Store: stores[i], Budgets: []core.Budget{budget}})
				if err != nil {
					b.Fatal(err)
				}
				layers[i] = eng.MustLayer(core.Use("hot"))
			}
			h := newHotRun()
			var pool sync.Pool
			runHot(b, clients, func(inst, i int) (*core.Outcome, error) {
				st, _ := pool.Get().(*benchRequest)
				if st == nil {
					st = new(benchRequest)
				}
				defer pool.Put(st)
				st.req = core.Request{Method: "POST", Path: "/", RemoteAddr: "hot", Context: ctx}
				d := &st.d
				d.Reset()
				layers[inst].Decide(&st.req, d)
				if d.Err != nil {
					return nil, d.Err
				}
				o := d.Results[0].Outcome
				h.record(window, &o, 1)
				return nil, nil
			})
			for _, s := range stores {
				s.Close()
			}
			over, wins, worst := h.checkWindows(nil, quota)
			var local, remote int64
			for _, s := range stores {
				st := s.LeaseStats()
				local += st.ServedLocal
				remote += st.ServedStore
			}
			b.ReportMetric(float64(over), "over-windows")
			b.ReportMetric(float64(wins), "windows")
			b.ReportMetric(100*float64(worst)/quota, "worst-short-%")
			if lease.Enabled() {
				b.ReportMetric(100*float64(local)/float64(local+remote), "local-%")
			}
		})
	}
}

// runHot runs b.N calls of fn spread over hotGoroutines goroutines per
// instance and reports decisions/s and the commands Redis ran per
// decision.
func runHot(b *testing.B, clients []redis.UniversalClient, fn func(inst, i int) (*core.Outcome, error)) {
	resetStats(b, clients[0])
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for inst := range clients {
		for g := 0; g < hotGoroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(b.N) {
						return
					}
					if _, err := fn(inst, int(i)); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	cmds := commandsTotal(b, clients[0])
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(cmds)/float64(b.N), "commands/decision")
}
