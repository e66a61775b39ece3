package observe_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/observe"
)

// TestSuppressedLinesDoNotAllocate: under a flood, a suppressed line costs
// no allocation, and neither does a decision with nothing to log.
func TestSuppressedLinesDoNotAllocate(t *testing.T) {
	c := newClock()
	lg := observe.MustLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)), observe.LoggerConfig{Lines: 1, Per: time.Hour, Clock: c})
	r := request("GET", "10.0.0.1:1")
	denied := &core.Decision{Allowed: false, Reason: core.ReasonRateLimited, DeniedBy: "a"}
	lg.ObserveDecision(r, denied, nil, 0) // uses the allowance
	if n := testing.AllocsPerRun(1000, func() { lg.ObserveDecision(r, denied, nil, 0) }); n != 0 {
		t.Errorf("suppressed denial: %v allocations", n)
	}
	quiet := &core.Decision{Allowed: true, Results: []core.Result{{
		Item: core.Item{Budget: "a", Limit: core.Limit{Quota: 100}, Cost: 1}, Outcome: core.Outcome{Allowed: true, Charged: true, Remaining: 90},
	}}}
	if n := testing.AllocsPerRun(1000, func() { lg.ObserveDecision(r, quiet, quiet.Results, time.Microsecond) }); n != 0 {
		t.Errorf("quiet decision: %v allocations", n)
	}
	if lg.Suppressed() < 1000 {
		t.Errorf("Suppressed() = %d, want >= 1000", lg.Suppressed())
	}
}

func BenchmarkLogger(b *testing.B) {
	r := request("GET", "10.0.0.1:1")
	quiet := &core.Decision{Allowed: true, Results: []core.Result{{
		Item: core.Item{Budget: "a", Limit: core.Limit{Quota: 100}, Cost: 1}, Outcome: core.Outcome{Allowed: true, Charged: true, Remaining: 90},
	}}}
	denied := &core.Decision{Allowed: false, Reason: core.ReasonRateLimited, DeniedBy: "a"}
	b.Run("quiet", func(b *testing.B) {
		lg := observe.MustLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)), observe.LoggerConfig{})
		b.ReportAllocs()
		for b.Loop() {
			lg.ObserveDecision(r, quiet, quiet.Results, time.Microsecond)
		}
	})
	b.Run("flood-suppressed", func(b *testing.B) {
		lg := observe.MustLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)), observe.LoggerConfig{Lines: 1, Per: time.Hour})
		b.ReportAllocs()
		for b.Loop() {
			lg.ObserveDecision(r, denied, nil, 0)
		}
	})
	b.Run("written", func(b *testing.B) {
		lg := observe.MustLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)), observe.LoggerConfig{Lines: 1 << 30, Per: time.Microsecond})
		b.ReportAllocs()
		for b.Loop() {
			lg.ObserveDecision(r, denied, nil, 0)
		}
	})
}
