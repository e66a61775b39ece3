package observe_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/observe"
)

// A request shed by a guard is logged with the guard's state, not as a
// budget's denial.
func TestLoggerShedRequest(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LogOptions{Lines: 100, Per: time.Minute, Clock: c, NearLimit: -1})
	e := newEngine(t, c, engineOpts{observer: lg},
		core.Budget{Name: "b", Quota: 100, Window: time.Minute, Key: remoteAddrKey})
	lim := adaptive.MustNew(adaptive.Config{Name: "api", Initial: 1, Min: 1, Max: 1})
	l := e.MustLayer(core.Use("b"), core.WithGuard(lim))
	if !decide(l, request("GET", "10.0.0.1:1")).Allowed {
		t.Fatal("first request shed")
	}
	if decide(l, request("GET", "10.0.0.1:1")).Allowed {
		t.Fatal("second request admitted beyond the limit")
	}
	ls := byEvent(lines(t, buf), "denied")
	if len(ls) != 1 {
		t.Fatalf("%d denial lines, want 1", len(ls))
	}
	if l := ls[0]; l["reason"] != "overloaded" || l["guard"] != "api" || l["limit"] != float64(1) || l["in_flight"] != float64(1) || l["budget"] != nil {
		t.Errorf("shed line %v", l)
	}
}
