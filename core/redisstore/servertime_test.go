package redisstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

// scriptUsec returns the calls and the total server time (µs) of the
// script commands (EVAL, EVALSHA, FCALL) in INFO commandstats. The time of
// a script command includes the commands the script calls.
func scriptUsec(t testing.TB, client *redis.Client) (calls, usec int64) {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		var rest string
		ok := false
		for _, cmd := range []string{"eval", "evalsha", "fcall"} {
			if r, found := strings.CutPrefix(line, "cmdstat_"+cmd+":"); found {
				rest, ok = r, true
			}
		}
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}

// callgrind runs callgrind_control with args on the valgrind process pid.
func callgrind(b *testing.B, pid string, args ...string) {
	b.Helper()
	if out, err := exec.Command("callgrind_control", append(args, pid)...).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %v: %v: %s", args, err, out)
	}
}

// callgrindTotal returns the instructions counted in the latest dump of
// process pid in dir (callgrind.out.<pid>.<n>, the highest n).
func callgrindTotal(b *testing.B, pid, dir string) int64 {
	b.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "callgrind.out."+pid+".*"))
	latest, last := "", -1
	for _, f := range files {
		if n, err := strconv.Atoi(f[strings.LastIndex(f, ".")+1:]); err == nil && n > last {
			latest, last = f, n
		}
	}
	data, err := os.ReadFile(latest)
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "totals: "); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no totals in %s", latest)
	return 0
}

// BenchmarkServerTime reports the Redis server's time per decision
// (server-µs/decision, from INFO commandstats: the script commands' usec
// over the decisions), with batching off (MaxBatch 1), so that every
// decision is one script run. The minimal-incr row is a script that runs
// INCRBY and PEXPIRE on one key, the least a counter costs; the issue's
// targets compare the store's rows with it. Rows:
//
//	minimal-incr            EVALSHA of INCRBY + PEXPIRE
//	floor-time-read-write   FCALL of a function that runs TIME, HMGET and
//	                        HSET on one hash and packs a reply: the least
//	                        a decision with the server's clock costs
//	<alg>-1budget           one budget of algorithm <alg>, one hot partition
//	fixed-3budget           three fixed windows of one partition
//	mixed-3budget           fixed window + token bucket + sliding window
//	fixed-1budget-crowded   one budget of a partition that holds 63 other
//	                        budgets' state
//	fixed-batch8-<n>keys    one script run of 8 decisions of one fixed
//	                        window each, on 1 key or on 8, as the batcher
//	                        sends 8 concurrent Takes (per decision)
//
// The sliding log row admits every decision, so its log grows by one entry
// per decision (up to b.N entries).
//
//	go test -run '^$' -bench BenchmarkServerTime -benchtime 3000x -count 3 ./core/redisstore/
//
// Server time is wall time inside the server, which other work on the
// machine inflates. With QUOTAGATE_CALLGRIND=<pid>,<addr>,<dir> the rows
// run against a redis-server the caller started under callgrind (pid,
// address, and the directory it writes its dumps to):
//
//	valgrind --tool=callgrind --instr-atstart=no redis-server --port 6431 --save '' &
//	QUOTAGATE_CALLGRIND=$!,127.0.0.1:6431,$PWD go test -run '^$' -bench BenchmarkServerTime -benchtime 500x ./core/redisstore/
//
// and also report the instructions the server executed per decision,
// which no other work changes (the server's data is flushed first).
func BenchmarkServerTime(b *testing.B) {
	ctx := context.Background()
	var client *redis.Client
	cg := strings.Split(os.Getenv("QUOTAGATE_CALLGRIND"), ",")
	if len(cg) == 3 {
		client = newClient(b, cg[1])
		if err := client.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := client.FunctionFlush(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	} else {
		_, client = startServer(b)
	}
	st := mustStore(b, client, Config{Prefix: "st:", MaxBatch: 1})
	if err := st.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	minimal, err := client.ScriptLoad(ctx, `redis.call('INCRBY', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], 60000)
return 1`).Result()
	if err != nil {
		b.Fatal(err)
	}
	// The least a decision that reads the server's clock, one record and
	// writes it back can cost, as a function: TIME, HMGET, HSET and a
	// packed reply, no algorithm.
	floorLib := `#!lua name=quotagate_floor
redis.register_function('quotagate_floor', function(keys, args)
  local t = redis.call('TIME')
  local v = redis.call('HMGET', keys[1], 'b', '\0')
  redis.call('HSET', keys[1], 'b', struct.pack('<i8i8i8i8', 0, t[1], 1, 0))
  return struct.pack('<i8i8i8i8i8', t[2], 3, 1, 1, 0)
end)`
	if err := client.FunctionLoad(ctx, floorLib).Err(); err != nil {
		b.Fatal(err)
	}
	hour := time.Hour
	lim := func(a core.Algorithm) core.Limit {
		// Quotas that admit every decision of a run, within what each
		// algorithm accepts (core.Limit.Validate).
		switch a {
		case core.TokenBucket, core.LeakyBucket:
			return core.Limit{Algorithm: a, Quota: 1_000_000, Window: time.Second, Burst: 1_000_000}
		case core.SlidingWindow:
			return core.Limit{Algorithm: a, Quota: 1_000_000_000, Window: hour}
		case core.SlidingLog:
			return core.Limit{Algorithm: a, Quota: core.MaxSlidingLogQuota, Window: hour}
		}
		return core.Limit{Algorithm: a, Quota: core.MaxQuota, Window: hour}
	}
	// report runs run b.N times; each run sends one script call that
	// takes per decisions.
	report := func(b *testing.B, per int, run func(i int) error) {
		b.Helper()
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		if len(cg) == 3 {
			callgrind(b, cg[0], "-i", "on")
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := run(i); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if len(cg) == 3 {
			callgrind(b, cg[0], "-i", "off")
			callgrind(b, cg[0], "-d")
			b.ReportMetric(float64(callgrindTotal(b, cg[0], cg[2]))/float64(b.N*per), "server-instructions/decision")
		}
		calls, usec := scriptUsec(b, client)
		if calls != int64(b.N) {
			b.Fatalf("%d script calls for %d decisions", calls, b.N)
		}
		b.ReportMetric(float64(usec)/float64(b.N*per), "server-µs/decision")
	}
	take := func(items []core.Item) func(int) error {
		out := make([]core.Outcome, len(items))
		return func(int) error {
			if err := st.Take(ctx, items, out); err != nil {
				return err
			}
			for i := range out {
				if !out[i].Allowed {
					return fmt.Errorf("item %d denied", i)
				}
			}
			return nil
		}
	}

	b.Run("minimal-incr", func(b *testing.B) {
		report(b, 1, func(int) error { return client.EvalSha(ctx, minimal, []string{"st:minimal"}).Err() })
	})
	b.Run("floor-time-read-write", func(b *testing.B) {
		report(b, 1, func(int) error { return client.FCall(ctx, "quotagate_floor", []string{"st:floor"}).Err() })
	})
	for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.SlidingLog, core.TokenBucket, core.LeakyBucket} {
		b.Run(a.String()+"-1budget", func(b *testing.B) {
			key := "one-" + a.String()
			report(b, 1, take([]core.Item{{Budget: "b", Key: key, Limit: lim(a), Cost: 1}}))
		})
	}
	b.Run("fixed-3budget", func(b *testing.B) {
		l := lim(core.FixedWindow)
		report(b, 1, take([]core.Item{{Budget: "b1", Key: "three", Limit: l, Cost: 1},
			{Budget: "b2", Key: "three", Limit: l, Cost: 1}, {Budget: "b3", Key: "three", Limit: l, Cost: 1}}))
	})
	b.Run("mixed-3budget", func(b *testing.B) {
		report(b, 1, take([]core.Item{{Budget: "tenant", Key: "mixed", Limit: lim(core.FixedWindow), Cost: 1},
			{Budget: "ip", Key: "mixed", Limit: lim(core.TokenBucket), Cost: 1},
			{Budget: "route", Key: "mixed", Limit: lim(core.SlidingWindow), Cost: 1}}))
	})
	b.Run("fixed-1budget-crowded", func(b *testing.B) {
		l := lim(core.FixedWindow)
		var out [1]core.Outcome
		for i := 0; i < 63; i++ {
			if err := st.Take(ctx, []core.Item{{Budget: "other" + strconv.Itoa(i), Key: "crowded", Limit: l, Cost: 1}}, out[:]); err != nil {
				b.Fatal(err)
			}
		}
		report(b, 1, take([]core.Item{{Budget: "b", Key: "crowded", Limit: l, Cost: 1}}))
	})
	// A batch of 8 decisions of one fixed window each, as the batcher
	// sends 8 concurrent Takes in one script run: on one key, or on 8.
	for _, keys := range []int{1, 8} {
		b.Run(fmt.Sprintf("fixed-batch8-%dkeys", keys), func(b *testing.B) {
			l := lim(core.FixedWindow)
			items := make([][]core.Item, 8)
			for j := range items {
				items[j] = []core.Item{{Budget: "b", Key: "batch" + strconv.Itoa(j%keys), Limit: l, Cost: 1}}
			}
			report(b, len(items), func(int) error {
				batch := make([]*pending, len(items))
				for j, it := range items {
					p := getPending(1)
					p.keys, p.blob = st.appendItems(p.keys, p.blob, it, nil, func(bb []byte, i int, name string, k, lk int) []byte {
						return appendTakeItem(bb, &it[i], name, k, lk)
					})
					batch[j] = p
				}
				bb := batchBufPool.Get().(*batchBuf)
				defer putBatchBuf(bb)
				if !st.runBatch(ctx, nil, batch, bb) {
					return batch[0].err
				}
				for _, p := range batch {
					if !p.out[0].Allowed {
						return fmt.Errorf("denied")
					}
					putPending(p)
				}
				return nil
			})
		})
	}
}
