package core_test

import (
	"context"
	"hash/maphash"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// The benchmarks use a limit no benchmark can exhaust, so every decision
// takes the allow-and-charge path, as peers' benchmarks do.
var hotLimit = core.Limit{Algorithm: core.FixedWindow, Quota: 1e12, Window: time.Hour}

func distinctKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "198.51." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256) + ":" + strconv.Itoa(i/65536)
	}
	return keys
}

func BenchmarkMemoryStore(b *testing.B) {
	for _, alg := range []core.Algorithm{core.FixedWindow, core.TokenBucket} {
		l := hotLimit
		l.Algorithm = alg
		if alg == core.TokenBucket {
			l = core.Limit{Algorithm: core.TokenBucket, Quota: 1e9, Window: time.Hour, Burst: 1e12}
		}
		b.Run("alg="+alg.String()+"/hot-serial", func(b *testing.B) {
			s := newStore(b, nil)
			items := []core.Item{{Budget: "b", Key: "203.0.113.9", Limit: l, Cost: 1}}
			out := make([]core.Outcome, 1)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = s.Take(ctx, items, out)
			}
		})
		b.Run("alg="+alg.String()+"/hot-parallel", func(b *testing.B) {
			s := newStore(b, nil)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				items := []core.Item{{Budget: "b", Key: "203.0.113.9", Limit: l, Cost: 1}}
				out := make([]core.Outcome, 1)
				ctx := context.Background()
				for pb.Next() {
					_ = s.Take(ctx, items, out)
				}
			})
		})
		keys := distinctKeys(100_000)
		b.Run("alg="+alg.String()+"/100k-serial", func(b *testing.B) {
			s := newStore(b, nil)
			items := []core.Item{{Budget: "b", Limit: l, Cost: 1}}
			out := make([]core.Outcome, 1)
			ctx := context.Background()
			for _, k := range keys { // the keys exist: measure the steady state
				items[0].Key = k
				_ = s.Take(ctx, items, out)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				items[0].Key = keys[i%len(keys)]
				_ = s.Take(ctx, items, out)
				i++
			}
		})
		b.Run("alg="+alg.String()+"/100k-parallel", func(b *testing.B) {
			s := newStore(b, nil)
			ctx := context.Background()
			out := make([]core.Outcome, 1)
			for _, k := range keys {
				_ = s.Take(ctx, []core.Item{{Budget: "b", Key: k, Limit: l, Cost: 1}}, out)
			}
			var seq atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 7919
				items := []core.Item{{Budget: "b", Limit: l, Cost: 1}}
				out := make([]core.Outcome, 1)
				for pb.Next() {
					items[0].Key = keys[i%len(keys)]
					_ = s.Take(ctx, items, out)
					i++
				}
			})
		})
	}
}

// BenchmarkMemoryStoreBytesPerKey reports the heap the store holds per
// key (B/key), not counting the key strings, which the caller allocated.
func BenchmarkMemoryStoreBytesPerKey(b *testing.B) {
	keys := distinctKeys(100_000)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := newStore(b, nil)
		ctx := context.Background()
		out := make([]core.Outcome, 1)
		for _, k := range keys {
			_ = s.Take(ctx, []core.Item{{Budget: "b", Key: k, Limit: hotLimit, Cost: 1}}, out)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(keys)), "B/key")
		runtime.KeepAlive(s)
	}
}

// BenchmarkMemoryStoreMillionKeys fills a default store with 1,000,000
// keys as traffic does (each key a string of its own, as a key function
// returns it, IPv4 addresses of 11 to 15 bytes) and reports what they
// cost: live heap per key after a GC, key strings included (heap-B/key),
// and the growth of the process's resident set per key (rss-B/key) and
// in total (rss-MB, the test binary included), read from /proc/self/status
// right after filling, before any forced GC, with the default GOGC. Run
// it alone, once:
//
//	go test -run '^$' -bench MillionKeys -benchtime 1x ./core/
func BenchmarkMemoryStoreMillionKeys(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		runtime.GC()
		debug.FreeOSMemory()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rss0 := vmRSS(b)
		s := memstore.MustNew(memstore.Config{SweepInterval: -1})
		ctx := context.Background()
		items := []core.Item{{Budget: "b", Limit: hotLimit, Cost: 1}}
		out := make([]core.Outcome, 1)
		for i := range n {
			items[0].Key = "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
			_ = s.Take(ctx, items, out)
		}
		rss1 := vmRSS(b)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/key")
		b.ReportMetric(float64(rss1-rss0)/n, "rss-B/key")
		b.ReportMetric(float64(rss1)/(1<<20), "rss-MB")
		if s.Len() < n*99/100 {
			b.Fatalf("%d keys held", s.Len())
		}
		runtime.KeepAlive(s)
	}
}

// vmRSS returns the process's resident set size in bytes.
func vmRSS(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func benchEngine(b *testing.B, budgets int) *core.Layer {
	names := make([]string, budgets)
	bs := make([]core.Budget, budgets)
	for i := range bs {
		names[i] = "b" + strconv.Itoa(i)
		bs[i] = core.Budget{Name: names[i], Quota: 1e12, Window: time.Hour, Key: remoteAddrKey}
	}
	e, _ := newEngine(b, core.NewSystemClock(), bs...)
	return e.MustLayer(core.Use(names...))
}

// BenchmarkDecide measures a whole decision: key function, quota, the
// store call and the result, through a Layer.
func BenchmarkDecide(b *testing.B) {
	b.Run("hot-serial", func(b *testing.B) {
		l := benchEngine(b, 1)
		r := request("GET", "203.0.113.9")
		var d core.Decision
		b.ReportAllocs()
		for b.Loop() {
			d.Reset()
			l.Decide(r, &d)
		}
	})
	b.Run("hot-parallel", func(b *testing.B) {
		l := benchEngine(b, 1)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := request("GET", "203.0.113.9")
			var d core.Decision
			for pb.Next() {
				d.Reset()
				l.Decide(r, &d)
			}
		})
	})
	keys := distinctKeys(100_000)
	reqs := make([]*core.Request, len(keys))
	for i, k := range keys {
		reqs[i] = request("GET", k)
	}
	b.Run("100k-parallel", func(b *testing.B) {
		l := benchEngine(b, 1)
		var d core.Decision
		for _, r := range reqs {
			d.Reset()
			l.Decide(r, &d)
		}
		var seq atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 7919
			var d core.Decision
			for pb.Next() {
				d.Reset()
				l.Decide(reqs[i%len(reqs)], &d)
				i++
			}
		})
	})
	b.Run("3-budgets-serial", func(b *testing.B) {
		l := benchEngine(b, 3)
		r := request("POST", "203.0.113.9")
		var d core.Decision
		b.ReportAllocs()
		for b.Loop() {
			d.Reset()
			l.Decide(r, &d)
		}
	})
}

// BenchmarkFloor measures what every in-memory decision pays before any
// limiter logic, on this machine: the monotonic clock read the store takes
// per decision, an uncontended lock and unlock, hashing a key to its
// shard, and, for takes on one key from every core, one atomic change of
// a shared cache line. A hot-key MemoryStore.Take cannot cost less than
// their sum.
func BenchmarkFloor(b *testing.B) {
	b.Run("clock-read", func(b *testing.B) {
		start := time.Now()
		var sink time.Duration
		for b.Loop() {
			sink += time.Since(start)
		}
		_ = sink
	})
	// A hot-key take with a clock that costs next to nothing (a fixed
	// instant, as a cached clock would read): the store's cost without the
	// clock read.
	b.Run("take-without-clock", func(b *testing.B) {
		s := newStore(b, frozenClock{time.Now()})
		items := []core.Item{{Budget: "b", Key: "203.0.113.9", Limit: hotLimit, Cost: 1}}
		out := make([]core.Outcome, 1)
		ctx := context.Background()
		for b.Loop() {
			_ = s.Take(ctx, items, out)
		}
	})
	// Takes on one key from every core each change the key's entry, one
	// cache line, and read the clock: they cannot go faster than this,
	// the floor of the hot-parallel rows on this machine.
	b.Run("contended-add-and-clock", func(b *testing.B) {
		var n atomic.Int64
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			var sink time.Duration
			for pb.Next() {
				sink += time.Since(start)
				n.Add(1)
			}
			n.Add(int64(sink) & 0)
		})
	})
	b.Run("lock-unlock", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			mu.Unlock()
		}
	})
	b.Run("maphash", func(b *testing.B) {
		seed := maphash.MakeSeed()
		var sink uint64
		for b.Loop() {
			sink += maphash.String(seed, "203.0.113.9")
		}
		_ = sink
	})
}

// frozenClock always reads the same instant.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time { return c.t }
