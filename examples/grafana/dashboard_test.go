// Package grafana holds a Grafana dashboard for package core/metrics
// (quotagate-dashboard.json) and the test that keeps its queries true to
// what core/metrics exports. See README.md.
package grafana

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
)

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Inputs []struct {
		Name, Type, PluginID string
	} `json:"__inputs"`
	Templating struct {
		List []struct{ Name string } `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// exported scrapes a real registry after some decisions and returns every
// family core/metrics exports with its label names.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{Budgets: []string{"live", "trial"}})
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	key := func(r *core.Request) (string, error) { return r.RemoteAddr, nil }
	eng := core.MustNew(core.Config{Store: store, Observer: m, Budgets: []core.Budget{
		{Name: "live", Quota: 2, Window: time.Minute, Key: key},
		{Name: "trial", Quota: 1, Window: time.Minute, Key: key, Shadow: true},
	}})
	if err := m.WatchEngine("main", eng); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemoryStore("memory", store); err != nil {
		t.Fatal(err)
	}
	l := eng.MustLayer(core.Use("live", "trial"))
	for range 3 {
		var d core.Decision
		l.Decide(&core.Request{Method: "GET", RemoteAddr: "192.0.2.1", Context: context.Background()}, &d)
	}
	m.ObserveError(core.KindStoreError, "", &core.StoreError{Op: "take", Err: errors.New("down")})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range fams {
		var labels []string
		for _, mm := range f.Metric {
			for _, lp := range mm.Label {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
			}
		}
		out[f.GetName()] = labels
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				l := append([]string{}, labels...)
				if s == "_bucket" {
					l = append(l, "le")
				}
				out[f.GetName()+s] = l
			}
		}
	}
	return out
}

var (
	metricRE   = regexp.MustCompile(`\bquotagate_[a-z_]+`)
	selectorRE = regexp.MustCompile(`(quotagate_[a-z_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	byRE       = regexp.MustCompile(`\bby \(([^)]*)\)`)
)

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("quotagate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" {
		t.Errorf("dashboard header: title %q uid %q inputs %+v", d.Title, d.UID, d.Inputs)
	}
	fams := exported(t)
	var outcomes []string
	for o := range observe.NumVerdicts {
		outcomes = append(outcomes, observe.Verdict(o).String())
	}
	used := map[string]bool{}
	ids := map[int]bool{}
	exprs := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %q has no size", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs++
				names := metricRE.FindAllString(tg.Expr, -1)
				if len(names) == 0 {
					t.Errorf("panel %q: query %q names no quotagate metric", p.Title, tg.Expr)
				}
				var labels []string
				for _, n := range names {
					ls, ok := fams[n]
					if !ok {
						t.Errorf("panel %q: %s is not a metric core/metrics exports", p.Title, n)
						continue
					}
					used[strings.TrimSuffix(n, "_bucket")] = true
					labels = append(labels, ls...)
				}
				for _, sel := range selectorRE.FindAllStringSubmatch(tg.Expr, -1) {
					for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
						if !slices.Contains(fams[sel[1]], m[1]) {
							t.Errorf("panel %q: %s has no label %q", p.Title, sel[1], m[1])
						}
						if m[1] == "outcome" {
							for _, v := range strings.Split(m[3], "|") {
								if !slices.Contains(outcomes, v) {
									t.Errorf("panel %q: outcome %q is not one of %v", p.Title, v, outcomes)
								}
							}
						}
					}
				}
				for _, by := range byRE.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(by[1], ",") {
						if l = strings.TrimSpace(l); !slices.Contains(labels, l) {
							t.Errorf("panel %q: grouping by %q, a label none of %v has", p.Title, l, names)
						}
					}
				}
				if strings.Contains(tg.Expr, "$") {
					for _, v := range regexp.MustCompile(`\$([a-z_]+)`).FindAllStringSubmatch(tg.Expr, -1) {
						if v[1] == "__rate_interval" {
							continue
						}
						if !slices.ContainsFunc(d.Templating.List, func(x struct{ Name string }) bool { return x.Name == v[1] }) {
							t.Errorf("panel %q: variable $%s is not defined", p.Title, v[1])
						}
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if exprs < 10 {
		t.Errorf("only %d queries", exprs)
	}
	// What the dashboard is for: every one of these is charted.
	for _, want := range []string{
		"quotagate_decisions_total", "quotagate_near_limit_total", "quotagate_store_errors_total",
		"quotagate_store_latency_seconds", "quotagate_breaker_open", "quotagate_memory_store_entries",
		"quotagate_memory_store_evictions_total", "quotagate_refunds_total", "quotagate_fallback_total",
		"quotagate_budget_errors_total",
	} {
		if !used[want] {
			t.Errorf("no panel charts %s", want)
		}
	}
	if !strings.Contains(string(b), `outcome=\"shadow_denied\"`) {
		t.Error("no panel charts shadow denials")
	}
}
