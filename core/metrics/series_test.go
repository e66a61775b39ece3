package metrics_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/scale"
)

// gatherEverySeries returns the families of a Metrics whose every method
// has been called, so that every series it can export has a sample.
func gatherEverySeries(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{Name: "b", Quota: 10, Window: time.Minute, Key: constKey}}})
	lim := adaptive.MustNew(adaptive.Config{Initial: 1, Min: 1, Max: 1})
	sc := scale.MustNew(scale.Config{Signal: func() float64 { return 1 }, Target: 1, Step: 0.25, Interval: time.Minute})
	for _, err := range []error{
		m.WatchEngine("main", eng), m.WatchMemoryStore("memory", store),
		m.WatchAdaptive("api", lim), m.WatchScale("b", sc),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Allowed near the limit, refunded, on the fallback store.
	d := &core.Decision{Allowed: true, Results: []core.Result{{
		Item:    core.Item{Budget: "b", Limit: core.Limit{Quota: 10}, Cost: 1},
		Outcome: core.Outcome{Allowed: true, Charged: true, Remaining: 1},
		Local:   true, Refunded: true,
	}}}
	m.ObserveDecision(&core.Request{}, d, d.Results, time.Millisecond)
	m.ObserveError(core.KindMissingKey, "b", core.ErrNoKey)
	m.ObserveError(core.KindStoreError, "", fmt.Errorf("down"))
	m.ObserveEviction("b")
	for ev := core.LeaseTaken; ev <= core.LeaseServedStore; ev++ {
		m.ObserveLease("b", ev, 1)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// tableDiffs lists every difference between the families a registry
// gathered, named with the prefix ns + "_", and table: a family the table
// does not hold, one whose help, type, label names or buckets differ from
// its entry, and an entry no family has.
func tableDiffs(fams []*dto.MetricFamily, ns string, table []observe.Series) []string {
	kinds := map[dto.MetricType]observe.SeriesKind{
		dto.MetricType_COUNTER: observe.Counter, dto.MetricType_GAUGE: observe.Gauge, dto.MetricType_HISTOGRAM: observe.Histogram,
	}
	var diffs []string
	seen := map[string]bool{}
	for _, f := range fams {
		name, ok := strings.CutPrefix(f.GetName(), ns+"_")
		i := slices.IndexFunc(table, func(s observe.Series) bool { return s.Name == name })
		if !ok || i < 0 {
			diffs = append(diffs, fmt.Sprintf("%s: not in the table", f.GetName()))
			continue
		}
		s := table[i]
		seen[s.Name] = true
		if f.GetHelp() != s.Help {
			diffs = append(diffs, fmt.Sprintf("%s: help %q, table %q", name, f.GetHelp(), s.Help))
		}
		if k, ok := kinds[f.GetType()]; !ok || k != s.Kind {
			diffs = append(diffs, fmt.Sprintf("%s: type %v, table %v", name, f.GetType(), s.Kind))
		}
		want := slices.Sorted(slices.Values(s.Labels))
		for _, m := range f.Metric {
			var got []string // sorted by the registry
			for _, l := range m.Label {
				got = append(got, l.GetName())
			}
			if !slices.Equal(got, want) {
				diffs = append(diffs, fmt.Sprintf("%s: labels %v, table %v", name, got, want))
				break
			}
		}
		if h := f.GetMetric()[0].GetHistogram(); h != nil || s.Buckets != nil {
			var bounds []float64
			for _, b := range h.GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if !slices.Equal(bounds, s.Buckets) {
				diffs = append(diffs, fmt.Sprintf("%s: buckets %v, table %v", name, bounds, s.Buckets))
			}
		}
	}
	for _, s := range table {
		if !seen[s.Name] {
			diffs = append(diffs, fmt.Sprintf("%s: in the table, not exported", s.Name))
		}
	}
	return diffs
}

// TestSeriesAsTable: every series Metrics exports is one of observe's
// table, with its help, type, labels and buckets, and every series of the
// table is exported.
func TestSeriesAsTable(t *testing.T) {
	if diffs := tableDiffs(gatherEverySeries(t), "quotagate", observe.AllSeries()); len(diffs) > 0 {
		t.Errorf("exported series differ from observe.AllSeries:\n\t%s", strings.Join(diffs, "\n\t"))
	}
}

// TestSeriesCheckFindsDrift: the comparison of TestSeriesAsTable notices
// each way an exporter can drift from the table, shown here by drifting
// the table instead.
func TestSeriesCheckFindsDrift(t *testing.T) {
	fams := gatherEverySeries(t)
	for what, drift := range map[string]func([]observe.Series) []observe.Series{
		"help":          func(tb []observe.Series) []observe.Series { tb[0].Help += " More."; return tb },
		"kind":          func(tb []observe.Series) []observe.Series { tb[1].Kind = observe.Gauge; return tb },
		"label renamed": func(tb []observe.Series) []observe.Series { tb[0].Labels = []string{"budget", "verdict"}; return tb },
		"label added":   func(tb []observe.Series) []observe.Series { tb[2].Labels = []string{"budget", "layer"}; return tb },
		"buckets": func(tb []observe.Series) []observe.Series {
			i := slices.IndexFunc(tb, func(s observe.Series) bool { return s.Kind == observe.Histogram })
			tb[i].Buckets = tb[i].Buckets[1:]
			return tb
		},
		"exported, not in the table": func(tb []observe.Series) []observe.Series { return tb[1:] },
		"in the table, not exported": func(tb []observe.Series) []observe.Series {
			return append(tb, observe.Series{Name: "new_total", Help: "New.", Kind: observe.Counter})
		},
	} {
		if diffs := tableDiffs(fams, "quotagate", drift(observe.AllSeries())); len(diffs) != 1 {
			t.Errorf("%s: %d differences %q, want 1", what, len(diffs), diffs)
		}
	}
}
