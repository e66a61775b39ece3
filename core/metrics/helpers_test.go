package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// fakeClock is the tests' hand-set clock.
type fakeClock = fakeclock.Clock

// newClock returns a fake clock at a minute boundary.
func newClock() *fakeClock { return fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)) }

func constKey(*core.Request) (string, error) { return "all", nil }

func remoteAddrKey(r *core.Request) (string, error) { return r.RemoteAddr, nil }

// clientIPKey keys a request by its peer's IP (without the port).
func clientIPKey(r *core.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", fmt.Errorf("%w: %v", core.ErrNoKey, err)
	}
	return host, nil
}

func headerKey(name string) core.KeyFunc {
	return func(r *core.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("header %s: %w", name, core.ErrNoKey)
	}
}

func newMemoryStore(t testing.TB, c core.Clock, maxEntries, shards int) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1, MaxEntries: maxEntries, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// series names one sample: metric name and label pairs, e.g.
// series("quotagate_decisions_total", "budget", "api", "outcome", "allowed").
func series(name string, labels ...string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// scrape fetches url over HTTP and returns every sample of the
// "quotagate_" families (histograms as _count and _sum samples), and how
// many series those families hold.
func scrape(t testing.TB, url string) (map[string]float64, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	out := map[string]float64{}
	n := 0
	for name, f := range fams {
		if !strings.HasPrefix(name, "quotagate_") {
			continue
		}
		for _, m := range f.Metric {
			n++
			var labels []string
			for _, lp := range m.Label {
				labels = append(labels, lp.GetName(), lp.GetValue())
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[series(name, labels...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[series(name, labels...)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[series(name+"_count", labels...)] = float64(m.GetHistogram().GetSampleCount())
				out[series(name+"_sum", labels...)] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("unexpected metric type %v of %s", f.GetType(), name)
			}
		}
	}
	return out, n
}

var outcomes = []string{"allowed", "denied", "shadow_denied", "failed_open", "failed_closed", "no_key", "bad_cost", "cost_too_high", "denied_elsewhere"}

// expected builds the full expected sample set for the given budgets, all
// zero, which a test then adjusts.
func expected(budgets ...string) map[string]float64 {
	want := map[string]float64{}
	for _, b := range budgets {
		for _, o := range outcomes {
			want[series("quotagate_decisions_total", "budget", b, "outcome", o)] = 0
		}
		want[series("quotagate_near_limit_total", "budget", b)] = 0
		want[series("quotagate_refunds_total", "budget", b)] = 0
		want[series("quotagate_fallback_total", "budget", b)] = 0
		want[series("quotagate_budget_errors_total", "budget", b, "kind", "no_key")] = 0
		want[series("quotagate_budget_errors_total", "budget", b, "kind", "other")] = 0
	}
	for _, k := range []string{"error", "timeout", "canceled", "breaker_open", "misconfigured"} {
		want[series("quotagate_store_errors_total", "kind", k)] = 0
	}
	for _, r := range []string{"ok", "error"} {
		want[series("quotagate_store_latency_seconds_count", "result", r)] = 0
	}
	return want
}

// compare checks got against want exactly, ignoring histogram sums
// (latencies) unless want names them.
func compare(t testing.TB, got, want map[string]float64) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("missing %s (want %v)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "quotagate_store_latency_seconds_sum") {
			diffs = append(diffs, fmt.Sprintf("unexpected %s = %v", k, g))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("metrics differ:\n\t%s", strings.Join(diffs, "\n\t"))
	}
}

// faultStore wraps a real store and fails every call while an error is
// set, to drive the engine's failure modes.
type faultStore struct {
	core.Store
	mu  sync.Mutex
	err error
}

func (f *faultStore) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *faultStore) current() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *faultStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if err := f.current(); err != nil {
		return err
	}
	return f.Store.Take(ctx, items, out)
}

func (f *faultStore) Refund(ctx context.Context, items []core.Item, outs []core.Outcome) error {
	if err := f.current(); err != nil {
		return err
	}
	return f.Store.Refund(ctx, items, outs)
}

// get sends a request to url with the given headers and returns the
// status.
func get(t testing.TB, url string, hdr ...string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func contextDeadline() error { return context.DeadlineExceeded }
