package main

import (
	"strings"
	"testing"
	"time"
)

// TestAdaptiveLimitKeepsLatency runs a short demonstration and checks its
// qualitative result, loosely enough for a busy machine: without a limit
// the latency grows with the length of the overload; with the adaptive
// limit requests are shed and the served ones are much faster than
// without a limit, while the service still does a good share of its work.
func TestAdaptiveLimitKeepsLatency(t *testing.T) {
	p := params{Capacity: 16, Service: 100 * time.Millisecond, Load: 1.5,
		Duration: 3 * time.Second, Unloaded: 1500 * time.Millisecond}
	res, err := run(p)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res.print(&out, p)
	t.Log("\n" + out.String())

	if res.Unloaded.Shed != 0 || res.Early.Shed != 0 || res.Late.Shed != 0 {
		t.Errorf("requests shed without a limit: %d, %d, %d", res.Unloaded.Shed, res.Early.Shed, res.Late.Shed)
	}
	// Without a limit, the queue grows by half the capacity per second:
	// the requests of the second half wait longer than those of the first.
	if res.Late.P99 <= res.Early.P99 || res.Late.P50 <= res.Early.P50 {
		t.Errorf("no limit: latency did not grow with the run: p50 %v then %v, p99 %v then %v",
			res.Early.P50, res.Late.P50, res.Early.P99, res.Late.P99)
	}
	if res.Adaptive.Shed == 0 {
		t.Error("the adaptive limit shed nothing at 1.5x capacity")
	}
	if res.Adaptive.P99 >= res.Late.P99/2 || res.Adaptive.P50 >= res.Late.P50/2 {
		t.Errorf("adaptive limit: p50 %v, p99 %v; want less than half of no limit's second half (%v, %v)",
			res.Adaptive.P50, res.Adaptive.P99, res.Late.P50, res.Late.P99)
	}
	if share := res.Adaptive.Served / p.rate(); share < 0.5 {
		t.Errorf("adaptive limit: served %.0f/s, %.0f%% of capacity; want at least 50%%", res.Adaptive.Served, 100*share)
	}
	if res.Limit.InFlight != 0 {
		t.Errorf("adaptive limit: %d requests still in flight after the run", res.Limit.InFlight)
	}
	if !strings.Contains(out.String(), "adaptive limit: second half") {
		t.Errorf("the table lacks the adaptive limit's second half:\n%s", out.String())
	}
}

// TestSteeringCases runs the steering cases in short and checks that no
// client makes the limit take /work's service away: in each case the
// limit sheds about as little of /work (and /reports) as of /work alone.
// It compares what the limit sheds, not what is served, since on a busy
// machine requests also go unanswered for want of CPU. The
// cases with a client at 10× the route's rate run with a service of 400ms
// (16 requests a second to the route, 160 from the client), so that -race
// keeps up on busy cores; the Sheddable one with 100ms, as the limit's
// growth takes a time proportional to the service time.
func TestSteeringCases(t *testing.T) {
	if testing.Short() {
		t.Skip("about 40s of load over real HTTP")
	}
	slow := steerParams{Capacity: 8, Service: 400 * time.Millisecond,
		Warmup: 2 * time.Second, Window: 3 * time.Second, Storm: 3 * time.Second}
	fast := slow
	fast.Service = 100 * time.Millisecond
	cases := append(steerCases(slow)[:4], steerCases(fast)[4:]...)
	if len(cases) != 5 {
		t.Fatalf("%d cases, want 5", len(cases))
	}
	var rows []steerRow
	for i, c := range cases {
		p := slow
		if i == 4 {
			p = fast
		}
		r, err := c.run(p)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r...)
	}
	t.Log("\n" + steerTable(slow, rows))
	alone := rows[0].Shed
	for i, r := range rows[1:] {
		if i == 2 {
			continue // the first seconds after the storm: the limit may still be learning
		}
		if r.Shed > alone+0.15 {
			t.Errorf("%s: %.1f%% shed, against %.1f%% for /work alone", r.Name, 100*r.Shed, 100*alone)
		}
	}
}
