package observe_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core/observe"
)

// TestSeriesTable checks the table the exporters read: names valid and
// unique, help written, kinds known, labels valid and unique, buckets on
// histograms only and ascending, a unit only where the name says it.
func TestSeriesTable(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9_]*[a-z0-9]$`)
	seen := map[string]bool{}
	all := observe.AllSeries()
	if len(all) == 0 {
		t.Fatal("empty table")
	}
	for _, s := range all {
		if !name.MatchString(s.Name) || seen[s.Name] {
			t.Errorf("%q: invalid or repeated name", s.Name)
		}
		seen[s.Name] = true
		if s.Help == "" || !strings.HasSuffix(s.Help, ".") {
			t.Errorf("%s: help %q is not a sentence", s.Name, s.Help)
		}
		switch s.Kind {
		case observe.Counter, observe.Gauge, observe.Histogram:
		default:
			t.Errorf("%s: kind %v", s.Name, s.Kind)
		}
		// Prometheus's conventions: a counter's name ends in _total, and
		// nothing else's does.
		if (s.Kind == observe.Counter) != strings.HasSuffix(s.Name, "_total") {
			t.Errorf("%s: a %v named _total or a counter not", s.Name, s.Kind)
		}
		if s.Unit != "" && (s.Unit != "s" || !strings.HasSuffix(s.Name, "_seconds")) {
			t.Errorf("%s: unit %q, want none or s on a _seconds name", s.Name, s.Unit)
		}
		if len(s.Labels) == 0 {
			t.Errorf("%s: no labels", s.Name)
		}
		for i, l := range s.Labels {
			if !name.MatchString(l) || slices.Contains(s.Labels[:i], l) {
				t.Errorf("%s: invalid or repeated label %q", s.Name, l)
			}
		}
		if (s.Kind == observe.Histogram) != (len(s.Buckets) > 0) || !slices.IsSorted(s.Buckets) || len(slices.Compact(slices.Clone(s.Buckets))) != len(s.Buckets) {
			t.Errorf("%s: %v with buckets %v", s.Name, s.Kind, s.Buckets)
		}
	}
}

// TestSeriesHelpNamesEveryValue: the help of a series whose label takes a
// fixed set of values names every one of them, so a new verdict or store
// error kind cannot be left out of it (as denied_elsewhere once was from
// one exporter's decisions_total).
func TestSeriesHelpNamesEveryValue(t *testing.T) {
	names := func(help string, values ...string) {
		t.Helper()
		for _, v := range values {
			if !regexp.MustCompile(`\b` + v + `\b`).MatchString(help) {
				t.Errorf("help %q does not name %s", help, v)
			}
		}
	}
	var verdicts []string
	for v := range observe.NumVerdicts {
		verdicts = append(verdicts, observe.Verdict(v).String())
	}
	names(observe.DecisionsTotal.Help, verdicts...)
	names(observe.StoreErrorsTotal.Help, observe.StoreLabels[:]...)
}

func TestSeriesKindString(t *testing.T) {
	for k, want := range map[observe.SeriesKind]string{
		observe.Counter: "counter", observe.Gauge: "gauge", observe.Histogram: "histogram", 0: "SeriesKind(0)", 9: "SeriesKind(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("SeriesKind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}
