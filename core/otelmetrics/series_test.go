package otelmetrics_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/otelmetrics"
	"github.com/quotagate/quotagate/core/scale"
)

// collectEverySeries returns the metrics of an Observer whose every method
// has been called, so that every instrument it creates has a data point.
func collectEverySeries(t *testing.T) []metricdata.Metrics {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	o := otelmetrics.MustNew(mp, otelmetrics.Config{})
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	key := func(*core.Request) (string, error) { return "all", nil }
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{Name: "b", Quota: 10, Window: time.Minute, Key: key}}})
	lim := adaptive.MustNew(adaptive.Config{Initial: 1, Min: 1, Max: 1})
	sc := scale.MustNew(scale.Config{Signal: func() float64 { return 1 }, Target: 1, Step: 0.25, Interval: time.Minute})
	for _, err := range []error{
		o.WatchEngine("main", eng), o.WatchMemoryStore("memory", store),
		o.WatchAdaptive("api", lim), o.WatchScale("b", sc),
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
	o.ObserveDecision(&core.Request{}, d, d.Results, time.Millisecond)
	o.ObserveError(core.KindMissingKey, "b", core.ErrNoKey)
	o.ObserveError(core.KindStoreError, "", fmt.Errorf("down"))
	o.ObserveEviction("b")
	for ev := core.LeaseTaken; ev <= core.LeaseServedStore; ev++ {
		o.ObserveLease("b", ev, 1)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

// instrument is what the table says of one collected instrument: its
// kind, the attribute keys of each data point, and a histogram's bounds.
func instrument(m metricdata.Metrics) (observe.SeriesKind, [][]string, []float64) {
	var sets []attribute.Set
	var kind observe.SeriesKind
	var bounds []float64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
		if d.IsMonotonic {
			kind = observe.Counter
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
		if d.IsMonotonic {
			kind = observe.Counter
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
		kind = observe.Gauge
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
		kind = observe.Gauge
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
			bounds = p.Bounds
		}
		kind = observe.Histogram
	}
	var keys [][]string
	for _, s := range sets {
		var k []string // sorted by the set
		for _, kv := range s.ToSlice() {
			k = append(k, string(kv.Key))
		}
		keys = append(keys, k)
	}
	return kind, keys, bounds
}

// tableDiffs lists every difference between the collected instruments,
// named with the prefix ns + "_", and table: an instrument the table does
// not hold, one whose description, unit, kind, attribute keys or bucket
// bounds differ from its entry, and an entry no instrument has.
func tableDiffs(ms []metricdata.Metrics, ns string, table []observe.Series) []string {
	var diffs []string
	seen := map[string]bool{}
	for _, m := range ms {
		name, ok := strings.CutPrefix(m.Name, ns+"_")
		i := slices.IndexFunc(table, func(s observe.Series) bool { return s.Name == name })
		if !ok || i < 0 {
			diffs = append(diffs, fmt.Sprintf("%s: not in the table", m.Name))
			continue
		}
		s := table[i]
		seen[s.Name] = true
		if m.Description != s.Help {
			diffs = append(diffs, fmt.Sprintf("%s: description %q, table %q", name, m.Description, s.Help))
		}
		if m.Unit != s.Unit {
			diffs = append(diffs, fmt.Sprintf("%s: unit %q, table %q", name, m.Unit, s.Unit))
		}
		kind, keys, bounds := instrument(m)
		if kind != s.Kind {
			diffs = append(diffs, fmt.Sprintf("%s: %T (kind %v), table %v", name, m.Data, kind, s.Kind))
		}
		want := slices.Sorted(slices.Values(s.Labels))
		for _, k := range keys {
			if !slices.Equal(k, want) {
				diffs = append(diffs, fmt.Sprintf("%s: attributes %v, table %v", name, k, want))
				break
			}
		}
		if !slices.Equal(bounds, s.Buckets) {
			diffs = append(diffs, fmt.Sprintf("%s: bucket bounds %v, table %v", name, bounds, s.Buckets))
		}
	}
	for _, s := range table {
		if !seen[s.Name] {
			diffs = append(diffs, fmt.Sprintf("%s: in the table, not recorded", s.Name))
		}
	}
	return diffs
}

// TestSeriesAsTable: every instrument the Observer records is one of
// observe's table, with its description, unit, kind, attributes and
// bucket bounds, and every series of the table is recorded.
func TestSeriesAsTable(t *testing.T) {
	if diffs := tableDiffs(collectEverySeries(t), "quotagate", observe.AllSeries()); len(diffs) > 0 {
		t.Errorf("recorded instruments differ from observe.AllSeries:\n\t%s", strings.Join(diffs, "\n\t"))
	}
}

// TestSeriesCheckFindsDrift: the comparison of TestSeriesAsTable notices
// each way an exporter can drift from the table, shown here by drifting
// the table instead.
func TestSeriesCheckFindsDrift(t *testing.T) {
	ms := collectEverySeries(t)
	for what, drift := range map[string]func([]observe.Series) []observe.Series{
		"help":          func(tb []observe.Series) []observe.Series { tb[0].Help += " More."; return tb },
		"unit":          func(tb []observe.Series) []observe.Series { tb[0].Unit = "1"; return tb },
		"kind":          func(tb []observe.Series) []observe.Series { tb[1].Kind = observe.Gauge; return tb },
		"label renamed": func(tb []observe.Series) []observe.Series { tb[0].Labels = []string{"budget", "verdict"}; return tb },
		"label added":   func(tb []observe.Series) []observe.Series { tb[2].Labels = []string{"budget", "layer"}; return tb },
		"buckets": func(tb []observe.Series) []observe.Series {
			i := slices.IndexFunc(tb, func(s observe.Series) bool { return s.Kind == observe.Histogram })
			tb[i].Buckets = tb[i].Buckets[1:]
			return tb
		},
		"recorded, not in the table": func(tb []observe.Series) []observe.Series { return tb[1:] },
		"in the table, not recorded": func(tb []observe.Series) []observe.Series {
			return append(tb, observe.Series{Name: "new_total", Help: "New.", Kind: observe.Counter})
		},
	} {
		if diffs := tableDiffs(ms, "quotagate", drift(observe.AllSeries())); len(diffs) != 1 {
			t.Errorf("%s: %d differences %q, want 1", what, len(diffs), diffs)
		}
	}
}
