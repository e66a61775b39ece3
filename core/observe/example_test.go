package observe_test

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
)

// A logger that writes at most two denial lines per hour, then reports how
// many it suppressed.
func ExampleNewLogger() {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == "retry_after" {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime}))
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 2, Per: time.Hour, NearLimit: -1})

	eng := core.MustNew(core.Config{
		Store:    memstore.MustNew(memstore.Config{}),
		Observer: lg,
		Budgets: []core.Budget{{
			Name: "login", Algorithm: core.TokenBucket, Quota: 1, Window: time.Hour,
			Key: func(r *core.Request) (string, error) { return r.RemoteAddr, nil }, KeyClass: "ip",
		}},
	})
	l := eng.MustLayer(core.Use("login"))
	for range 6 {
		var d core.Decision
		l.Decide(&core.Request{Method: "POST", Route: "/login", RemoteAddr: "192.0.2.1:4242"}, &d)
	}
	lg.Flush()
	// Output:
	// level=INFO msg="quotagate: request denied" event=denied reason=rate_limited budget=login key_class=ip quota=1 window=1h0m0s method=POST route=/login
	// level=INFO msg="quotagate: request denied" event=denied reason=rate_limited budget=login key_class=ip quota=1 window=1h0m0s method=POST route=/login
	// level=INFO msg="quotagate: log lines suppressed" event=denied suppressed=3
}

// Several observers on one engine.
func ExampleMulti() {
	lg := observe.MustLogger(nil, observe.LoggerConfig{}) // slog.Default()
	counts := &countObserver{}
	eng := core.MustNew(core.Config{
		Store:    memstore.MustNew(memstore.Config{}),
		Observer: observe.Multi(lg, counts),
		Budgets: []core.Budget{{
			Name: "api", Quota: 100, Window: time.Minute,
			Key: func(*core.Request) (string, error) { return "all", nil },
		}},
	})
	var d core.Decision
	eng.MustLayer(core.Use("api")).Decide(&core.Request{Method: "GET"}, &d)
	fmt.Println(d.Allowed, counts.decisions)
	// Output: true 1
}
