package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/observe"
)

// leaseSeries are the series of a store's leases (core.LeaseObserver).
type leaseSeries struct {
	leases, units, decisions *prometheus.CounterVec
}

func newLeaseSeries(counter func(observe.Series) *prometheus.CounterVec) *leaseSeries {
	return &leaseSeries{
		leases:    counter(observe.LeasesTotal),
		units:     counter(observe.LeaseUnitsTotal),
		decisions: counter(observe.LeaseDecisionsTotal),
	}
}

func (l *leaseSeries) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.leases, l.units, l.decisions}
}

// ObserveLease implements [core.LeaseObserver]: give the Metrics (alone or
// through observe.Multi) to redisstore.Config.Observer to count what the
// store's leases do in leases_total, lease_units_total and
// lease_decisions_total. The share of decisions served locally is
//
//	sum(rate(quotagate_lease_decisions_total{served="local"}[5m]))
//	  / sum(rate(quotagate_lease_decisions_total[5m]))
func (m *Metrics) ObserveLease(budget string, event core.LeaseEvent, units int64) {
	label := m.budget(budget).label
	n := float64(units)
	switch event {
	case core.LeaseTaken, core.LeaseReturned, core.LeaseExpired:
		m.lease.leases.WithLabelValues(label, event.String()).Inc()
		m.lease.units.WithLabelValues(label, event.String()).Add(n)
	case core.LeaseStranded:
		m.lease.units.WithLabelValues(label, event.String()).Add(n)
	case core.LeaseServedLocal:
		m.lease.decisions.WithLabelValues(label, "local").Add(n)
	case core.LeaseServedStore:
		m.lease.decisions.WithLabelValues(label, "store").Add(n)
	}
}
