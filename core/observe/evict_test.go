package observe_test

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
)

// A Logger given to a memory store (through Multi, as to the engine) logs
// evictions with their budget, rate-limited: every eviction is either a
// line or counted as suppressed, and a victim budget the flood cannot
// touch never appears.
func TestLoggerReportsEvictionsRateLimited(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 3, Per: time.Minute, Clock: c})
	rec := &recorder{}
	obs := observe.Multi(lg, rec)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 16, Shards: 1, SweepInterval: -1, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Store: s, Clock: c, Observer: obs, Budgets: []core.Budget{
		{Name: "tenant", Quota: 3, Window: time.Minute, Key: func(r *core.Request) (string, error) { return r.Path, nil }, KeyClass: "tenant"},
		{Name: "public", Quota: 100, Window: time.Hour, Key: remoteAddrKey, KeyClass: "ip"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tenant, public := e.MustLayer(core.Use("tenant")), e.MustLayer(core.Use("public"))
	if !decide(tenant, &core.Request{Method: "GET", Path: "acme"}).Allowed {
		t.Fatal("tenant denied")
	}
	for i := range 100 {
		if !decide(public, request("GET", "198.51.100."+strconv.Itoa(i)+":1")).Allowed {
			t.Fatalf("flood request %d denied", i)
		}
	}
	evicted := s.BudgetEvictions("public")
	if evicted != 100+1-16 || s.BudgetEvictions("tenant") != 0 {
		t.Fatalf("evictions: public %d, tenant %d", evicted, s.BudgetEvictions("tenant"))
	}
	lg.Flush()
	ls := byEvent(lines(t, buf), "evicted")
	written := 0
	for _, l := range ls {
		if l["level"] != "WARN" {
			t.Fatalf("eviction line %v", l)
		}
		if l["msg"] == "quotagate: log lines suppressed" { // from Flush
			continue
		}
		if l["budget"] != "public" {
			t.Fatalf("eviction line %v", l)
		}
		written++
	}
	if written != 3 || int64(written)+suppressedSum(ls) != int64(evicted) {
		t.Fatalf("%d eviction lines and %d suppressed for %d evictions", written, suppressedSum(ls), evicted)
	}
}
