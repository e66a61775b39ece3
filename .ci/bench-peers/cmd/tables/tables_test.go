package main

import (
	"math"
	"strings"
	"testing"
)

// Two passes of the harness's output, as `go test -bench` prints it, with
// the lines it prints around them.
const twoPasses = `goos: linux
goarch: amd64
pkg: github.com/quotagate/quotagate/benchpeers
cpu: AMD EPYC
BenchmarkInMem/row=one-key-serial/c=quotagate-2         	20000000	        60.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkInMem/row=one-key-serial/c=sethvargo-2         	20000000	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkInMem/row=one-key-serial/c=ulule-2             	 3000000	       300.0 ns/op	      24 B/op	       2 allocs/op
BenchmarkMiddleware/router=echov4/mode=serial/c=_bare-2 	 5000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkMiddleware/router=echov4/mode=serial/c=quotagate-2 	 1000000	       700.0 ns/op	     480 B/op	       3 allocs/op
BenchmarkMiddleware/router=echov4/mode=serial/c=echo-2  	 1000000	       500.0 ns/op	      80 B/op	       1 allocs/op
BenchmarkRedis/keys=1/g=8/c=quotagate-2                 	   10000	     20000 ns/op	        50000 decisions/s	         0 errors/op	     400 B/op	       9 allocs/op
BenchmarkRedis/keys=1/g=8/c=ulule-2                     	   10000	     40000 ns/op	        25000 decisions/s	         0 errors/op	     460 B/op	      16 allocs/op
BenchmarkRedis/keys=1/g=8/c=floor-2                     	   10000	     25000 ns/op	        40000 decisions/s	         0 errors/op	     280 B/op	       8 allocs/op
--- FAIL: BenchmarkRedis/keys=1/g=64/c=ulule
    bench_test.go:10: 3 errors
PASS
ok  	github.com/quotagate/quotagate/benchpeers	12.3s
BenchmarkInMem/row=one-key-serial/c=quotagate-2         	20000000	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkInMem/row=one-key-serial/c=sethvargo-2         	20000000	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkInMem/row=one-key-serial/c=ulule-2             	 3000000	       320.0 ns/op	      24 B/op	       2 allocs/op
BenchmarkMiddleware/router=echov4/mode=serial/c=_bare-2 	 5000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkMiddleware/router=echov4/mode=serial/c=quotagate-2 	 1000000	       920.0 ns/op	     480 B/op	       3 allocs/op
BenchmarkMiddleware/router=echov4/mode=serial/c=echo-2  	 1000000	       520.0 ns/op	      80 B/op	       1 allocs/op
BenchmarkRedis/keys=1/g=8/c=quotagate-2                 	   10000	     20000 ns/op	        60000 decisions/s	         0 errors/op	     400 B/op	       9 allocs/op
BenchmarkRedis/keys=1/g=8/c=ulule-2                     	   10000	     40000 ns/op	        30000 decisions/s	      0.01 errors/op	     460 B/op	      16 allocs/op
BenchmarkRedis/keys=1/g=8/c=floor-2                     	   10000	     25000 ns/op	        40000 decisions/s	         0 errors/op	     280 B/op	       8 allocs/op
`

func TestParseBench(t *testing.T) {
	rs, err := ParseBench(strings.NewReader(twoPasses))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 18 {
		t.Fatalf("%d results, want 18", len(rs))
	}
	r := rs[6]
	if r.Name != "Redis/keys=1/g=8/c=quotagate" || r.Group() != "Redis" || r.Param("c") != "quotagate" ||
		r.Param("keys") != "1" || r.Param("g") != "8" || r.Iterations != 10000 {
		t.Fatalf("result 6: %+v", r)
	}
	for unit, want := range map[string]float64{"ns/op": 20000, "decisions/s": 50000, "errors/op": 0, "B/op": 400, "allocs/op": 9} {
		if got, ok := r.Metrics[unit]; !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", unit, got, ok, want)
		}
	}
	s := NewSeries(rs)
	if got := s.Values("InMem/row=one-key-serial/c=quotagate", "ns/op"); len(got) != 2 || got[0] != 60 || got[1] != 40 {
		t.Errorf("quotagate's passes: %v", got)
	}
	if got := s.Names()[0]; got != "InMem/row=one-key-serial/c=quotagate" {
		t.Errorf("first name %q", got)
	}
}

func TestParseBenchKeepsHyphenatedNames(t *testing.T) {
	for in, want := range map[string]string{
		"BenchmarkInMem/row=one-key-serial/c=quotagate-nofields-16": "InMem/row=one-key-serial/c=quotagate-nofields",
		"BenchmarkInMem/row=one-key-serial/c=quotagate-nofields":    "InMem/row=one-key-serial/c=quotagate-nofields",
		"BenchmarkX-2": "X",
	} {
		rs, err := ParseBench(strings.NewReader(in + "  100  5.0 ns/op\n"))
		if err != nil || len(rs) != 1 || rs[0].Name != want {
			t.Errorf("%s: %+v %v, want %s", in, rs, err, want)
		}
	}
}

func TestParseBenchRejectsBadValue(t *testing.T) {
	if _, err := ParseBench(strings.NewReader("BenchmarkX-2  100  fast ns/op\n")); err == nil {
		t.Fatal("no error for a value that is not a number")
	}
}

func TestParseAccuracy(t *testing.T) {
	in := "=== RUN   TestAccuracy\nACCURACY c=quotagate trial=1 admitted=1000 requests=1500 errors=0\n" +
		"ACCURACY c=redis_rate trial=2 admitted=1002 requests=1500 errors=1\n--- PASS: TestAccuracy (1.2s)\n"
	ts, err := ParseAccuracy(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Trial{{"quotagate", 1, 1000, 1500, 0}, {"redis_rate", 2, 1002, 1500, 1}}
	if len(ts) != 2 || ts[0] != want[0] || ts[1] != want[1] {
		t.Fatalf("%+v, want %+v", ts, want)
	}
	if _, err := ParseAccuracy(strings.NewReader("ACCURACY c=x admitted=many\n")); err == nil {
		t.Fatal("no error for a count that is not a number")
	}
}

func TestRender(t *testing.T) {
	rs, err := ParseBench(strings.NewReader(twoPasses))
	if err != nil {
		t.Fatal(err)
	}
	out := Render(NewSeries(rs), []Trial{{"quotagate", 1, 1000, 1500, 0}, {"quotagate", 2, 1000, 1500, 0}}, "test machine")
	for _, want := range []string{
		"Method: test machine",
		// quotagate 60 then 40 ns, sethvargo 80 both times: median 50,
		// ratios 0.75 and 0.5, median 0.625 (0.62 in float64).
		"| one key, serial | 50.0 (40.0–60.0) | 80.0 (80.0–80.0) | 310 (300–320), 2 allocs | 0.62× (sethvargo/go-limiter) |",
		// Over the bare router: quotagate 600 and 800, Echo 400 both times.
		"| serial | 110 (100–120) | 700 (600–800), 3 allocs | 400 (400–400), 1 alloc | 1.75× (Echo's RateLimiter) |",
		// Throughput: quotagate 50k and 60k, ulule 25k and 30k, floor 40k.
		"| 1 key, 8 goroutines | 55.0k (50.0k–60.0k), 138% | 27.5k (25.0k–30.0k), 69%, 0.5% errors | 40.0k (40.0k–40.0k) | 0.50× (ulule/limiter) |",
		"| quotagate | 1000, 1000 | 1000 / 1000 / 1000 | 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderDelayedAndLatency(t *testing.T) {
	in := `BenchmarkRedis/keys=1/g=8/c=quotagate-2 	 1000	 1 ns/op	 50000 decisions/s	 0 errors/op	 150.0 p50-µs	 900.0 p99-µs
BenchmarkRedis/keys=1/g=8/c=floor-2 	 1000	 1 ns/op	 40000 decisions/s	 0 errors/op	 190.0 p50-µs	 1500 p99-µs
BenchmarkRedisDelayed/delay=500us/keys=1/g=8/c=quotagate-2 	 1000	 1 ns/op	 7000 decisions/s	 0 errors/op	 1150 p50-µs	 2400 p99-µs
BenchmarkRedisDelayed/delay=500us/keys=1/g=8/c=ulule-2 	 1000	 1 ns/op	 6000 decisions/s	 0 errors/op	 1300 p50-µs	 2600 p99-µs
BenchmarkRedisDelayed/delay=500us/keys=1/g=8/c=floor-2 	 1000	 1 ns/op	 7000 decisions/s	 0 errors/op	 1100 p50-µs	 2000 p99-µs
BenchmarkRedisCluster/keys=10000/g=64/c=quotagate-2 	 1000	 1 ns/op	 90000 decisions/s	 0 errors/op	 600.0 p50-µs	 2000 p99-µs
BenchmarkRedisCluster/keys=10000/g=64/c=ulule-2 	 1000	 1 ns/op	 60000 decisions/s	 0 errors/op	 900.0 p50-µs	 3000 p99-µs
BenchmarkRedisCluster/keys=10000/g=64/c=floor-2 	 1000	 1 ns/op	 100000 decisions/s	 0 errors/op	 550.0 p50-µs	 1900 p99-µs
`
	rs, err := ParseBench(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	out := Render(NewSeries(rs), nil, "")
	for _, want := range []string{
		"### Redis: decision latency",
		"| 1 key, 8 goroutines | 150 µs / 900 µs | 190 µs / 1.5 ms |",
		"### Redis through a proxy holding each direction 500 µs: decisions per second",
		"| 1 key, 8 goroutines | 7.00k, 100% | 6.00k, 86% | 7.00k | 0.86× (ulule/limiter) |",
		"| 1 key, 8 goroutines | 1.1 ms / 2.4 ms | 1.3 ms / 2.6 ms | 1.1 ms / 2.0 ms |",
		"### Redis Cluster of three masters: decisions per second",
		"| 10,000 keys, 64 goroutines | 90.0k, 90% | 60.0k, 60% | 100k | 0.67× (ulule/limiter) |",
		"### Redis Cluster of three masters: decision latency",
		"| 10,000 keys, 64 goroutines | 600 µs / 2.0 ms | 900 µs / 3.0 ms | 550 µs / 1.9 ms |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSplice(t *testing.T) {
	doc := "# Perf\n\nprose\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nmore prose\n"
	got, err := Splice(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Perf\n\nprose\n\n" + beginMarker + "\n\nnew table\n\n" + endMarker + "\n\nmore prose\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := Splice("no markers", "x"); err == nil {
		t.Fatal("no error without markers")
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{3.14159: "3.14", 57.12: "57.1", 163.4: "163", 12345.6: "12,346", -1500: "-1,500", math.NaN(): "—"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}
