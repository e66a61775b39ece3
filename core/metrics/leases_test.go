package metrics_test

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/metrics"
	"github.com/quotagate/quotagate/core/observe"
)

// Lease events reach their series through observe.Multi, as a Redis store
// given the observer reports them.
func TestLeaseSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.MustNew(reg, metrics.Config{})
	lg, err := observe.NewLogger(slog.New(slog.DiscardHandler), observe.LoggerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lo, ok := observe.Multi(m, lg).(core.LeaseObserver)
	if !ok {
		t.Fatal("observe.Multi does not implement core.LeaseObserver")
	}
	lo.ObserveLease("hot", core.LeaseTaken, 100)
	lo.ObserveLease("hot", core.LeaseTaken, 50)
	lo.ObserveLease("hot", core.LeaseExpired, 30)
	lo.ObserveLease("hot", core.LeaseReturned, 5)
	lo.ObserveLease("hot", core.LeaseStranded, 7)
	lo.ObserveLease("hot", core.LeaseServedLocal, 990)
	lo.ObserveLease("hot", core.LeaseServedStore, 10)
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	got, _ := scrape(t, srv.URL)
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"quotagate_leases_total", "event", "taken", 2},
		{"quotagate_leases_total", "event", "expired", 1},
		{"quotagate_leases_total", "event", "returned", 1},
		{"quotagate_lease_units_total", "event", "taken", 150},
		{"quotagate_lease_units_total", "event", "expired", 30},
		{"quotagate_lease_units_total", "event", "returned", 5},
		{"quotagate_lease_units_total", "event", "stranded", 7},
		{"quotagate_lease_decisions_total", "served", "local", 990},
		{"quotagate_lease_decisions_total", "served", "store", 10},
	} {
		if v := got[series(c.name, "budget", "hot", c.label, c.value)]; v != c.want {
			t.Errorf("%s{budget=hot,%s=%s} = %v, want %v", c.name, c.label, c.value, v, c.want)
		}
	}
}
