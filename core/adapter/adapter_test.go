package adapter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/core/memstore"
)

func byAddr(r *core.Request) (string, error) { return r.RemoteAddr, nil }

// TestLimitByBudgetName: LimitBy's budget is "default" unless BudgetName
// says otherwise, and a name core refuses is reported.
func TestLimitByBudgetName(t *testing.T) {
	l := adapter.MustLimitBy(2, time.Minute, byAddr)
	if got := l.Budgets(); len(got) != 1 || got[0] != adapter.DefaultBudgetName {
		t.Errorf("budgets %q, want [default]", got)
	}
	l = adapter.MustLimitBy(2, time.Minute, byAddr, adapter.BudgetName("per_ip"))
	if got := l.Budgets(); len(got) != 1 || got[0] != "per_ip" {
		t.Errorf("budgets %q, want [per_ip]", got)
	}
	var d core.Decision
	l.Decide(&core.Request{Method: "GET", RemoteAddr: "a"}, &d)
	if !d.Allowed || d.Results[0].Budget != "per_ip" {
		t.Errorf("decision %+v, want allowed by per_ip", d)
	}
	if _, err := adapter.LimitBy(2, time.Minute, byAddr, adapter.BudgetName("bad\nname")); err == nil {
		t.Error("a name with a newline: no error")
	}
}

// TestMiddlewareRefusesBudgetName: an engine's layer cannot take a
// LimitBy budget's name, which it would silently ignore.
func TestMiddlewareRefusesBudgetName(t *testing.T) {
	eng := core.MustNew(core.Config{
		Store:   memstore.MustNew(memstore.Config{}),
		Budgets: []core.Budget{{Name: "api", Quota: 1, Window: time.Minute, Key: byAddr}},
	})
	_, err := adapter.Middleware(eng, func(l *core.Layer) *core.Layer { return l }, core.Use("api"), adapter.BudgetName("x"))
	if err == nil || !strings.Contains(err.Error(), "core.Budget.Name") {
		t.Errorf("error %v, want one saying budgets are named in core.Budget.Name", err)
	}
}

// TestShedByNeedsAGuard: ShedBy without a guard is an error, not a layer
// that limits nothing.
func TestShedByNeedsAGuard(t *testing.T) {
	if _, err := adapter.ShedBy(nil); err == nil || !strings.Contains(err.Error(), "no guard") {
		t.Errorf("error %v, want no guard", err)
	}
}
