package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// The traffic every algorithm sees: a client idle for the first 750 ms,
// then sending a request every 25 ms (40 per second) until 3 s. Every
// budget allows 10 per second.
const (
	quota      = 10
	window     = time.Second
	idleUntil  = 750 * time.Millisecond
	every      = 25 * time.Millisecond
	trafficEnd = 3 * time.Second
)

// epoch is a whole second, so fixed windows start at 0 s, 1 s, 2 s.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// algorithmRun is what one algorithm did with the traffic.
type algorithmRun struct {
	Name, Note string
	Sent       []time.Duration // when each request was sent
	Admitted   []time.Duration // when each admitted request reached the handler (after any shaping delay)
}

// MaxIn returns the most requests admitted in any interval of length d.
func (r algorithmRun) MaxIn(d time.Duration) int {
	best, j := 0, 0
	for i := range r.Admitted {
		for r.Admitted[i]-r.Admitted[j] >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// algorithms runs the traffic through a budget of each algorithm on a
// memory store, advancing a fake clock request by request.
func algorithms() ([]algorithmRun, error) {
	specs := []struct {
		name, note string
		b          core.Budget
	}{
		{"fixed window", "10 per window aligned to the second: up to 20 within a few hundred ms across a boundary", core.Budget{Algorithm: core.FixedWindow}},
		{"sliding window counter", "the previous window's count weighted by its overlap, plus the current one: an approximation", core.Budget{Algorithm: core.SlidingWindow}},
		{"sliding log", "exactly 10 in any 1 s", core.Budget{Algorithm: core.SlidingLog}},
		{"token bucket (burst 10)", "a full bucket of 10, then one token every 100 ms", core.Budget{Algorithm: core.TokenBucket}},
		{"leaky bucket (shaping)", "requests wait up to 1 s for their slot: one every 100 ms", core.Budget{Algorithm: core.LeakyBucket, MaxWait: time.Second}},
	}
	var runs []algorithmRun
	for _, s := range specs {
		clk := &fakeClock{t: epoch}
		store, err := memstore.New(memstore.Config{Clock: clk, SweepInterval: -1})
		if err != nil {
			return nil, err
		}
		b := s.b
		b.Name, b.Quota, b.Window = "b", quota, window
		b.Key = func(*core.Request) (string, error) { return "client", nil }
		eng, err := core.New(core.Config{Store: store, Clock: clk, Budgets: []core.Budget{b}})
		if err != nil {
			return nil, err
		}
		layer, err := eng.Layer(core.Use("b"))
		if err != nil {
			return nil, err
		}
		run := algorithmRun{Name: s.name, Note: s.note}
		for t := idleUntil; t < trafficEnd; t += every {
			clk.set(epoch.Add(t))
			var d core.Decision
			layer.Decide(&core.Request{Method: "GET", Context: context.Background()}, &d)
			run.Sent = append(run.Sent, t)
			if d.Allowed {
				run.Admitted = append(run.Admitted, t+d.Delay)
			}
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// algorithmsSVG draws one row per algorithm: every request sent (grey
// ticks), every request admitted (dark bars, where it reached the
// handler), and the count admitted in the trailing second (a line, with
// the quota dashed).
func algorithmsSVG() ([]byte, error) {
	runs, err := algorithms()
	if err != nil {
		return nil, err
	}
	const (
		W, left, right = 760.0, 185.0, 20.0
		rowH, top      = 104.0, 70.0
		span           = 3.2 // seconds shown
	)
	plotW := W - left - right
	x := func(d time.Duration) float64 { return left + d.Seconds()/span*plotW }
	H := top + rowH*float64(len(runs)) + 34
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="system-ui, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15" font-weight="600">Same traffic, five algorithms: 10 requests per second allowed</text>`+"\n", 12.0)
	fmt.Fprintf(&b, `<text x="12" y="40" fill="#555">A client idle until 0.75 s, then sending a request every 25 ms (40 per second). Memory store, fake clock.</text>`+"\n")
	fmt.Fprintf(&b, `<text x="12" y="56" fill="#555">Grey: sent. Blue: admitted (shaped: when it reaches the handler). Line: admitted in the last 1 s.</text>`+"\n")
	for i, r := range runs {
		y0 := top + rowH*float64(i)
		base := y0 + rowH - 22
		scale := (rowH - 44) / 20.0 // the line's y per request (0..20)
		fmt.Fprintf(&b, `<g><text x="12" y="%.1f" font-weight="600">%s</text>`+"\n", y0+16, r.Name)
		fmt.Fprintf(&b, `<text x="12" y="%.1f" fill="#555">max %d in 1 s</text>`+"\n", y0+32, r.MaxIn(window))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="#555" font-size="11">%s</text>`+"\n", left, y0+12, r.Note)
		for s := 0; s <= 3; s++ {
			xs := x(time.Duration(s) * time.Second)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", xs, y0+16, xs, base)
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", left, base-quota*scale, W-right, base-quota*scale)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#999" font-size="10" text-anchor="end">10</text>`+"\n", left-4, base-quota*scale+3)
		for _, t := range r.Sent {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c8c8c8"/>`+"\n", x(t), base+4, x(t), base+10)
		}
		for _, t := range r.Admitted {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="2.4" height="9" fill="#1f5fbf"/>`+"\n", x(t)-1.2, base+2)
		}
		// Admitted in the trailing second, sampled every 10 ms.
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f5fbf" stroke-width="1.5" points="`)
		j, k := 0, 0
		for t := time.Duration(0); t.Seconds() <= span; t += 10 * time.Millisecond {
			for k < len(r.Admitted) && r.Admitted[k] <= t {
				k++
			}
			for j < k && r.Admitted[j] <= t-window {
				j++
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", x(t), base-float64(k-j)*scale)
		}
		fmt.Fprintf(&b, `"/></g>`+"\n")
	}
	axis := top + rowH*float64(len(runs)) + 4
	for s := 0; s <= 3; s++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%d s</text>`+"\n", x(time.Duration(s)*time.Second), axis+12, s)
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}
