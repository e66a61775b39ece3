package observe

import "strconv"

// Series describes one metric series that the exporters core/metrics
// (Prometheus) and core/otelmetrics (OpenTelemetry) export: this table is
// the only place its name, help, kind and labels are written, both
// exporters build their instruments from it at construction, and each
// checks in its tests that what it exports is exactly this table.
//
// The table's variables are a definition, not a setting: an exporter reads
// them when it is created, and a program should not change them.
type Series struct {
	// Name is the series' name without the namespace: an exporter prefixes
	// its configured namespace and "_" (default "quotagate_").
	Name string
	// Help is the Prometheus help text, and the OpenTelemetry instrument's
	// description.
	Help string
	// Kind fixes the Prometheus type and the OpenTelemetry instrument.
	Kind SeriesKind
	// Labels are the label (attribute) names of every sample, in the order
	// core/metrics gives their values.
	Labels []string
	// Unit is the UCUM unit OpenTelemetry records ("s"), empty when none
	// is recorded. Prometheus has it in the name's suffix.
	Unit string
	// Buckets are a histogram's default bucket upper bounds, ascending;
	// nil for other kinds.
	Buckets []float64
}

// SeriesKind is how a [Series]' value behaves. The zero value is no kind.
type SeriesKind uint8

const (
	// Counter only grows, from zero when the process starts: a Prometheus
	// counter, an OpenTelemetry counter (observable when it is read from a
	// watched object).
	Counter SeriesKind = iota + 1
	// Gauge is a value read at each collection from a watched object,
	// which may go down: a Prometheus gauge, an OpenTelemetry observable
	// gauge.
	Gauge
	// Histogram is a distribution of measurements in buckets: a
	// Prometheus histogram, an OpenTelemetry histogram.
	Histogram
)

// String returns the kind's Prometheus type name: "counter", "gauge" or
// "histogram"; "SeriesKind(n)" for anything else.
func (k SeriesKind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "SeriesKind(" + strconv.Itoa(int(k)) + ")"
}

// The series recorded as the engine reports decisions and errors
// ([core.Observer]). A budget label's values are budget names, at most an
// exporter's MaxBudgets of them, the rest sharing "_other".
var (
	// DecisionsTotal counts each budget's evaluations by [Verdict]; its
	// help names every verdict.
	DecisionsTotal = Series{
		Name:   "decisions_total",
		Help:   "Budget evaluations by budget and outcome (allowed, denied, denied_elsewhere, shadow_denied, failed_open, failed_closed, no_key, bad_cost, cost_too_high).",
		Kind:   Counter,
		Labels: []string{"budget", "outcome"},
	}
	// NearLimitTotal counts allowed requests at or above the near-limit
	// share of a budget (see [NearLimit]).
	NearLimitTotal = Series{
		Name:   "near_limit_total",
		Help:   "Allowed requests that used at least the near-limit share of the budget's capacity.",
		Kind:   Counter,
		Labels: []string{"budget"},
	}
	// RefundsTotal counts charges given back, by budget.
	RefundsTotal = Series{
		Name:   "refunds_total",
		Help:   "Charges given back: another layer denied the request, core.CountWhen rejected its status, or its shaping wait was cut short.",
		Kind:   Counter,
		Labels: []string{"budget"},
	}
	// FallbackTotal counts evaluations on the engine's fallback store.
	FallbackTotal = Series{
		Name:   "fallback_total",
		Help:   "Budget evaluations made on the engine's fallback store while the main store was unavailable.",
		Kind:   Counter,
		Labels: []string{"budget"},
	}
	// BudgetErrorsTotal counts the errors of one budget; kind is no_key or
	// other.
	BudgetErrorsTotal = Series{
		Name:   "budget_errors_total",
		Help:   "Errors concerning one budget: no_key (a key function found no key), other (key, quota or cost function errors).",
		Kind:   Counter,
		Labels: []string{"budget", "kind"},
	}
	// StoreErrorsTotal counts store errors; kind is one of [StoreLabels],
	// all of which its help names.
	StoreErrorsTotal = Series{
		Name:   "store_errors_total",
		Help:   "Store errors by kind: error, timeout, canceled, breaker_open (a call skipped by the open circuit breaker), misconfigured (a store set up wrongly, e.g. a single-node Redis client on a cluster).",
		Kind:   Counter,
		Labels: []string{"kind"},
	}
	// StoreLatencySeconds is the histogram of one layer's store call;
	// result is ok or error. Its buckets run from 10µs (an in-memory
	// store) to 250ms (a store timing out).
	StoreLatencySeconds = Series{
		Name:   "store_latency_seconds",
		Help:   "Duration of the store call of one layer's decision, by result (ok, error).",
		Kind:   Histogram,
		Labels: []string{"result"},
		Unit:   "s",
		Buckets: []float64{
			0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
			0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
		},
	}
)

// The series recorded when the exporter is a store's observer: a memory
// store's ([core.EvictionObserver]) or a Redis store's
// ([core.LeaseObserver]).
var (
	// MemoryEvictionsTotal counts a budget's live entries that a full
	// memory store evicted; a budget's series appears at its first
	// eviction.
	MemoryEvictionsTotal = Series{
		Name:   "memory_evictions_total",
		Help:   "Live entries of the budget that a memory store evicted because it was full: each such key lost its count.",
		Kind:   Counter,
		Labels: []string{"budget"},
	}
	// LeasesTotal counts leases by event: taken, returned, expired.
	LeasesTotal = Series{
		Name:   "leases_total",
		Help:   "Leases of a hot key's budget this instance's store took, and that ended early and gave back their unspent units (returned) or reached their TTL (expired), by budget and event.",
		Kind:   Counter,
		Labels: []string{"budget", "event"},
	}
	// LeaseUnitsTotal counts leases' units by event: taken, returned,
	// expired, stranded.
	LeaseUnitsTotal = Series{
		Name:   "lease_units_total",
		Help:   "Units of leases: taken (charged in the store beyond the cost of the request that took the lease), returned and expired (unspent, given back), stranded (unspent and not given back: the window had ended, or giving back failed), by budget and event.",
		Kind:   Counter,
		Labels: []string{"budget", "event"},
	}
	// LeaseDecisionsTotal counts decisions of leased budgets by where they
	// were served: local or store.
	LeaseDecisionsTotal = Series{
		Name:   "lease_decisions_total",
		Help:   "Decisions of leased budgets, by budget and by where they were served: local (from a lease or a recent denial, with no store call) or store.",
		Kind:   Counter,
		Labels: []string{"budget", "served"},
	}
)

// The series read at each collection from the objects an exporter
// watches (its WatchEngine, WatchMemoryStore, WatchAdaptive and WatchScale
// methods), labelled with the name each was watched under.
var (
	// BreakerOpen is 1 while an engine's circuit breaker is open.
	BreakerOpen = Series{
		Name:   "breaker_open",
		Help:   "1 while the engine's circuit breaker skips the store, else 0.",
		Kind:   Gauge,
		Labels: []string{"engine"},
	}
	// MemoryStoreEntries is the number of keys a memory store holds.
	MemoryStoreEntries = Series{
		Name:   "memory_store_entries",
		Help:   "Keys held by the memory store, expired ones included until swept.",
		Kind:   Gauge,
		Labels: []string{"store"},
	}
	// MemoryStoreEvictionsTotal counts a memory store's evictions.
	MemoryStoreEvictionsTotal = Series{
		Name:   "memory_store_evictions_total",
		Help:   "Live entries the memory store evicted because it was full.",
		Kind:   Counter,
		Labels: []string{"store"},
	}
	// AdaptiveLimit is an adaptive limit's current limit.
	AdaptiveLimit = Series{
		Name:   "adaptive_limit",
		Help:   "The adaptive limit's current concurrency limit (for critical requests).",
		Kind:   Gauge,
		Labels: []string{"limiter"},
	}
	// AdaptiveInFlight is the number of requests inside an adaptive limit.
	AdaptiveInFlight = Series{
		Name:   "adaptive_in_flight",
		Help:   "Requests inside the adaptive limit.",
		Kind:   Gauge,
		Labels: []string{"limiter"},
	}
	// AdaptiveShedTotal counts the requests an adaptive limit shed, by
	// priority.
	AdaptiveShedTotal = Series{
		Name:   "adaptive_shed_total",
		Help:   "Requests the adaptive limit shed (answered 503), by priority.",
		Kind:   Counter,
		Labels: []string{"limiter", "priority"},
	}
	// AdaptiveSignal is the load signal an adaptive limit last acted on.
	AdaptiveSignal = Series{
		Name:   "adaptive_signal",
		Help:   "The load signal the adaptive limit last acted on: mean latency over no-load latency, or the supplied signal.",
		Kind:   Gauge,
		Labels: []string{"limiter"},
	}
	// AdaptiveLatencySeconds is an adaptive limit's mean latency
	// (kind=mean) and no-load latency (kind=no_load). It records no Unit:
	// OpenTelemetry never had one for it, and adding one would rename the
	// series for an OpenTelemetry Prometheus exporter that adds units.
	AdaptiveLatencySeconds = Series{
		Name:   "adaptive_latency_seconds",
		Help:   "The adaptive limit's mean latency (kind=mean) and no-load latency (kind=no_load) at its last update.",
		Kind:   Gauge,
		Labels: []string{"limiter", "kind"},
	}
	// BudgetScale is a scaled budget's current scale, in (0, 1].
	BudgetScale = Series{
		Name:   "budget_scale",
		Help:   "The factor, in (0, 1], that a scaled budget's quota is multiplied by now.",
		Kind:   Gauge,
		Labels: []string{"budget"},
	}
	// BudgetScaleSignal is the load signal a scale controller last read.
	BudgetScaleSignal = Series{
		Name:   "budget_scale_signal",
		Help:   "The load signal the budget's scale controller last read.",
		Kind:   Gauge,
		Labels: []string{"budget"},
	}
	// BudgetScaleChangesTotal counts the updates that changed a scale.
	BudgetScaleChangesTotal = Series{
		Name:   "budget_scale_changes_total",
		Help:   "The updates that changed the budget's scale.",
		Kind:   Counter,
		Labels: []string{"budget"},
	}
)

// AllSeries returns every series of the table, in the order above, in a
// new slice. Both exporters export all of them.
func AllSeries() []Series {
	return []Series{
		DecisionsTotal, NearLimitTotal, RefundsTotal, FallbackTotal,
		BudgetErrorsTotal, StoreErrorsTotal, StoreLatencySeconds,
		MemoryEvictionsTotal, LeasesTotal, LeaseUnitsTotal, LeaseDecisionsTotal,
		BreakerOpen, MemoryStoreEntries, MemoryStoreEvictionsTotal,
		AdaptiveLimit, AdaptiveInFlight, AdaptiveShedTotal, AdaptiveSignal, AdaptiveLatencySeconds,
		BudgetScale, BudgetScaleSignal, BudgetScaleChangesTotal,
	}
}
