// Package metrics exports what a quotagate engine decides as Prometheus
// metrics, with github.com/prometheus/client_golang. It is the only
// quotagate package that imports a metrics library: applications that do
// not want Prometheus do not import it.
//
// [New] returns a [Metrics], a [core.Observer] to put in the engine's
// configuration (alone, or with other observers through observe.Multi);
// [Handler] serves the registry. Series, all prefixed "quotagate_" by
// default:
//
//	decisions_total{budget,outcome}    one per budget per decision; outcome is
//	                                   allowed, denied, denied_elsewhere, shadow_denied,
//	                                   failed_open, failed_closed, no_key, bad_cost
//	                                   or cost_too_high
//	near_limit_total{budget}           allowed requests at or above the near-limit share
//	refunds_total{budget}              charges given back (another layer denied, CountWhen, a shaping wait cut short)
//	fallback_total{budget}             evaluations on the engine's fallback store
//	budget_errors_total{budget,kind}   kind: no_key, other (key, quota, cost errors)
//	store_errors_total{kind}           kind: error, timeout, canceled, breaker_open,
//	                                   misconfigured (e.g. MOVED: a single-node client on a cluster)
//	store_latency_seconds{result}      histogram of store calls; result: ok, error
//	breaker_open{engine}               1 while the circuit breaker skips the store
//	memory_store_entries{store}        keys held by a memstore.Store
//	memory_store_evictions_total{store}
//	adaptive_limit{limiter}            an adaptive limit's current limit (WatchAdaptive),
//	adaptive_in_flight{limiter}        the requests inside it,
//	adaptive_shed_total{limiter,priority}  the requests it shed, by priority,
//	adaptive_signal{limiter}           the load signal it last acted on,
//	adaptive_latency_seconds{limiter,kind} its mean latency (kind=mean) and no-load
//	                                   latency (kind=no_load) at its last update
//	budget_scale{budget}               a scaled budget's current scale, in (0, 1]
//	                                   (WatchScale, a core/scale Controller),
//	budget_scale_signal{budget}        the load signal its last update read,
//	budget_scale_changes_total{budget} the updates that changed its scale
//	memory_evictions_total{budget}     live entries of the budget a memory store
//	                                   evicted because it was full (when the
//	                                   Metrics is the store's observer; a
//	                                   budget's series appears at its first
//	                                   eviction)
//	leases_total{budget,event}         leases a Redis store took (taken) and that
//	                                   ended early (returned) or at their TTL
//	                                   (expired), when the Metrics is the
//	                                   store's observer (redisstore.Config)
//	lease_units_total{budget,event}    their units: taken, returned, expired,
//	                                   stranded (never spent, not given back)
//	lease_decisions_total{budget,served}  decisions of leased budgets served
//	                                   local (no store call) or by the store
//
// Each series' name, help, type and labels are defined once, in package
// core/observe (observe.AllSeries), which core/otelmetrics reads too.
//
// An outcome is what the budget did with the request (see observe.Verdict),
// counted once per request when the request's fate in its layer is final:
// allowed counts only requests that were let through; a budget that had
// room when another budget (of its layer, or of a later layer) denied the
// request counts as denied_elsewhere. So one budget's outcomes add up to
// the requests it evaluated. refunds_total counts the charges given back
// because another layer denied, core.CountWhen rejected the status, or a
// shaping wait was cut short; Engine.Refund gives charges back without
// telling observers, so they are not counted.
//
// Label values never include a partition key. Budget names come from the
// configuration, and at most [Config].MaxBudgets distinct ones become
// label values; any further budget is counted under budget="_other". So
// the number of series is fixed by the configuration, whatever the
// traffic.
//
// Observing a decision does not allocate: each budget's counters are
// resolved once and cached.
package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/scale"
)

// OtherBudget is the budget label value of budgets beyond
// [Config].MaxBudgets.
const OtherBudget = "_other"

// DefaultLatencyBuckets are the store latency histogram's buckets, in
// seconds: from 10µs (an in-memory store) to 250ms (a store timing out), a
// copy of observe.StoreLatencySeconds.Buckets.
var DefaultLatencyBuckets = slices.Clone(observe.StoreLatencySeconds.Buckets)

// Config configures [New]. The zero value is usable.
type Config struct {
	// Namespace prefixes every metric name. Default "quotagate".
	Namespace string
	// ConstLabels are added to every series, e.g. {"service": "api"}.
	ConstLabels prometheus.Labels
	// Budgets are created at New, so their series exist (at zero) before
	// the first request. Other budgets get their series when first seen.
	Budgets []string
	// MaxBudgets caps the number of distinct budget label values; budgets
	// beyond it share budget="_other". Default 64.
	MaxBudgets int
	// NearLimit is the share of a budget's capacity at or above which an
	// allowed request counts in near_limit_total (see observe.NearLimit).
	// Default 0.8. Negative disables the count. Must be at most 1.
	NearLimit float64
	// LatencyBuckets are the store latency histogram's buckets in seconds.
	// Default DefaultLatencyBuckets.
	LatencyBuckets []float64
}

// Metrics is a [core.Observer] that counts decisions and errors in
// Prometheus metrics. It is safe for concurrent use.
type Metrics struct {
	near float64
	max  int

	decisions    *prometheus.CounterVec
	nearLimit    *prometheus.CounterVec
	refunds      *prometheus.CounterVec
	fallback     *prometheus.CounterVec
	evictions    *prometheus.CounterVec
	budgetErrors *prometheus.CounterVec
	storeErrors  [core.NumStoreErrorKinds]prometheus.Counter
	latency      [2]prometheus.Observer // ok, error

	lease *leaseSeries

	mu       sync.Mutex // serialises adding budgets
	budgets  atomic.Pointer[map[string]*budgetSeries]
	other    atomic.Pointer[budgetSeries]
	watching *watcher
}

// budgetSeries is one budget's counters, resolved once.
type budgetSeries struct {
	outcomes  [observe.NumVerdicts]prometheus.Counter
	near      prometheus.Counter
	refunds   prometheus.Counter
	fallback  prometheus.Counter
	noKey     prometheus.Counter
	otherErrs prometheus.Counter
	label     string
	// evictions is created at the budget's first eviction, so a Metrics
	// not observing a memory store adds no series.
	evictions atomic.Pointer[prometheus.Counter]
}

// New creates the metrics, registers them with reg
// (prometheus.DefaultRegisterer when nil) and returns the observer that
// updates them.
func New(reg prometheus.Registerer, cfg Config) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	cfg = withDefaults(cfg)
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if len(cfg.ConstLabels) > 0 {
		reg = prometheus.WrapRegistererWith(cfg.ConstLabels, reg)
	}
	m, storeErrors, latency := newCollectors(cfg)
	for _, c := range append([]prometheus.Collector{m.decisions, m.nearLimit, m.refunds, m.fallback, m.evictions, m.budgetErrors, storeErrors, latency, m.watching}, m.lease.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	for k, label := range observe.StoreLabels {
		m.storeErrors[k] = storeErrors.WithLabelValues(label)
	}
	m.latency[0] = latency.WithLabelValues("ok")
	m.latency[1] = latency.WithLabelValues("error")

	empty := map[string]*budgetSeries{}
	m.budgets.Store(&empty)
	for _, b := range cfg.Budgets {
		m.budget(b)
	}
	return m, nil
}

// withDefaults returns cfg with its zero fields set to their defaults.
func withDefaults(cfg Config) Config {
	if cfg.Namespace == "" {
		cfg.Namespace = "quotagate"
	}
	if cfg.MaxBudgets == 0 {
		cfg.MaxBudgets = 64
	}
	if cfg.NearLimit == 0 {
		cfg.NearLimit = 0.8
	}
	if cfg.LatencyBuckets == nil {
		cfg.LatencyBuckets = DefaultLatencyBuckets
	}
	return cfg
}

// checkConfig returns a [core.ConfigError] listing every problem with cfg
// (after defaults), or nil.
func checkConfig(cfg Config) error {
	var problems []error
	if cfg.MaxBudgets < 0 {
		problems = append(problems, fmt.Errorf("metrics: max budgets %d is negative", cfg.MaxBudgets))
	}
	if cfg.NearLimit > 1 {
		problems = append(problems, fmt.Errorf("metrics: near-limit share %v is above 1", cfg.NearLimit))
	}
	if len(problems) > 0 {
		return &core.ConfigError{Problems: problems}
	}
	return nil
}

// newCollectors creates the metrics of cfg, unregistered: a Metrics
// holding the per-budget vectors, the watched objects' and the leases'
// collectors, and the vectors of store errors and latency, whose few
// series New resolves once registered.
func newCollectors(cfg Config) (*Metrics, *prometheus.CounterVec, *prometheus.HistogramVec) {
	ns := cfg.Namespace
	counter := func(s observe.Series) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: s.Name, Help: s.Help}, s.Labels)
	}
	m := &Metrics{
		near:         cfg.NearLimit,
		max:          cfg.MaxBudgets,
		decisions:    counter(observe.DecisionsTotal),
		nearLimit:    counter(observe.NearLimitTotal),
		refunds:      counter(observe.RefundsTotal),
		fallback:     counter(observe.FallbackTotal),
		evictions:    counter(observe.MemoryEvictionsTotal),
		budgetErrors: counter(observe.BudgetErrorsTotal),
	}
	storeErrors := counter(observe.StoreErrorsTotal)
	sl := observe.StoreLatencySeconds
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: sl.Name, Help: sl.Help, Buckets: cfg.LatencyBuckets,
	}, sl.Labels)
	m.watching = newWatcher(ns)
	m.lease = newLeaseSeries(counter)
	return m, storeErrors, latency
}

// MustNew is New for a configuration known to be valid; it panics on error.
func MustNew(reg prometheus.Registerer, cfg Config) *Metrics {
	m, err := New(reg, cfg)
	if err != nil {
		panic(err)
	}
	return m
}

// Handler returns an http.Handler serving g's metrics in the Prometheus
// exposition formats (prometheus.DefaultGatherer when nil). A
// *prometheus.Registry is both the Registerer given to [New] and the
// Gatherer given here:
//
//	reg := prometheus.NewRegistry()
//	m := metrics.MustNew(reg, metrics.Config{})
//	mux.Handle("GET /metrics", metrics.Handler(reg))
func Handler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

func (m *Metrics) newSeries(label string) *budgetSeries {
	s := &budgetSeries{
		near:      m.nearLimit.WithLabelValues(label),
		refunds:   m.refunds.WithLabelValues(label),
		fallback:  m.fallback.WithLabelValues(label),
		label:     label,
		noKey:     m.budgetErrors.WithLabelValues(label, "no_key"),
		otherErrs: m.budgetErrors.WithLabelValues(label, "other"),
	}
	for o := range s.outcomes {
		s.outcomes[o] = m.decisions.WithLabelValues(label, observe.Verdict(o).String())
	}
	return s
}

// budget returns the counters of the named budget.
func (m *Metrics) budget(name string) *budgetSeries {
	bs := *m.budgets.Load()
	if s := bs[name]; s != nil {
		return s
	}
	if len(bs) >= m.max {
		return m.otherSeries()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	bs = *m.budgets.Load()
	if s := bs[name]; s != nil {
		return s
	}
	if len(bs) >= m.max {
		return m.otherSeriesLocked()
	}
	next := make(map[string]*budgetSeries, len(bs)+1)
	for k, v := range bs {
		next[k] = v
	}
	s := m.newSeries(name)
	next[name] = s
	m.budgets.Store(&next)
	return s
}

func (m *Metrics) otherSeries() *budgetSeries {
	if s := m.other.Load(); s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.otherSeriesLocked()
}

func (m *Metrics) otherSeriesLocked() *budgetSeries {
	if s := m.other.Load(); s != nil {
		return s
	}
	s := m.newSeries(OtherBudget)
	m.other.Store(s)
	return s
}

// ObserveDecision implements [core.Observer].
func (m *Metrics) ObserveDecision(_ *core.Request, d *core.Decision, layer []core.Result, storeLatency time.Duration) {
	if len(layer) == 0 {
		if o, ok := observe.DeniedBeforeStore(d, layer); ok && d.DeniedBy != "" {
			m.budget(d.DeniedBy).outcomes[o].Inc()
		}
		return
	}
	failed := false
	for i := range layer {
		res := &layer[i]
		s := m.budget(res.Budget)
		o := observe.Classify(d, res)
		s.outcomes[o].Inc()
		if o == observe.FailedOpen || o == observe.FailedClosed {
			failed = true
		}
		if res.Local {
			failed = true
			s.fallback.Inc()
		}
		if m.near > 0 && observe.NearLimit(d, res, m.near) {
			s.near.Inc()
		}
		// Each layer is observed once, when its results are final: a
		// charge given back (another layer denied, core.CountWhen, a
		// shaping wait cut short) is counted by the layer that made it.
		if res.Refunded {
			s.refunds.Inc()
		}
	}
	if storeLatency > 0 {
		switch {
		case !failed:
			m.latency[0].Observe(storeLatency.Seconds())
		case !errors.Is(d.Err, core.ErrBreakerOpen):
			// A call skipped by the breaker took no store time.
			m.latency[1].Observe(storeLatency.Seconds())
		}
	}
}

// ObserveError implements [core.Observer].
func (m *Metrics) ObserveError(kind core.ErrorKind, budget string, _ error) {
	switch {
	case kind.IsStore():
		m.storeErrors[kind].Inc()
	case kind == core.KindMissingKey:
		m.budget(budget).noKey.Inc()
	default:
		m.budget(budget).otherErrs.Inc()
	}
}

// ObserveEviction implements [core.EvictionObserver]: give the Metrics
// (alone or through observe.Multi) to memstore.Config.Observer to count
// a memory store's evictions per budget in memory_evictions_total.
func (m *Metrics) ObserveEviction(budget string) {
	s := m.budget(budget)
	c := s.evictions.Load()
	if c == nil {
		// Two first evictions may both get here: WithLabelValues returns
		// the same child to both.
		child := m.evictions.WithLabelValues(s.label)
		c = &child
		s.evictions.Store(c)
	}
	(*c).Inc()
}

// WatchEngine exports eng's circuit-breaker state as
// breaker_open{engine=name}: 1 while the breaker skips the store, else 0.
// It is read at each scrape. Names must be unique per Metrics.
func (m *Metrics) WatchEngine(name string, eng *core.Engine) error {
	if eng == nil {
		return errors.New("metrics: watch engine: nil engine")
	}
	return addNamed(&m.watching.mu, &m.watching.engines, name, eng)
}

// WatchMemoryStore exports s's number of keys as
// memory_store_entries{store=name} and its evictions as
// memory_store_evictions_total{store=name}, read at each scrape (counting
// a memstore.Store's entries briefly locks each shard in turn). s is a
// memstore.Store, or any store that reports those numbers. Names must be
// unique per Metrics.
func (m *Metrics) WatchMemoryStore(name string, s core.StoreStats) error {
	if s == nil {
		return errors.New("metrics: watch memory store: nil store")
	}
	return addNamed(&m.watching.mu, &m.watching.stores, name, s)
}

// WatchAdaptive exports the state of an adaptive limit (core/adaptive) as
// the adaptive_* series with limiter=name, read at each scrape. Names must
// be unique per Metrics.
func (m *Metrics) WatchAdaptive(name string, l *adaptive.Limiter) error {
	if l == nil {
		return errors.New("metrics: watch adaptive: nil limiter")
	}
	return addNamed(&m.watching.mu, &m.watching.limiters, name, l)
}

// WatchScale exports the state of a budget's scale (a core/scale
// Controller) as the budget_scale* series with budget=name, read at each
// scrape: the budget's name, or, for a Controller that scales several
// budgets, a name of its own. Names must be unique per Metrics.
func (m *Metrics) WatchScale(name string, c *scale.Controller) error {
	if c == nil {
		return errors.New("metrics: watch scale: nil controller")
	}
	return addNamed(&m.watching.mu, &m.watching.scales, name, c)
}

// watcher collects the polled metrics of watched engines, stores,
// adaptive limits and scales.
type watcher struct {
	breaker, entries, evictions                *prometheus.Desc
	limit, inFlight, shed, signal, meanLatency *prometheus.Desc
	scale, scaleSignal, scaleChanges           *prometheus.Desc

	mu       sync.Mutex
	engines  []named[*core.Engine]
	stores   []named[core.StoreStats]
	limiters []named[*adaptive.Limiter]
	scales   []named[*scale.Controller]
}

type named[T any] struct {
	name string
	v    T
}

func newWatcher(ns string) *watcher {
	desc := func(s observe.Series) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", s.Name), s.Help, s.Labels, nil)
	}
	return &watcher{
		breaker:      desc(observe.BreakerOpen),
		entries:      desc(observe.MemoryStoreEntries),
		evictions:    desc(observe.MemoryStoreEvictionsTotal),
		limit:        desc(observe.AdaptiveLimit),
		inFlight:     desc(observe.AdaptiveInFlight),
		shed:         desc(observe.AdaptiveShedTotal),
		signal:       desc(observe.AdaptiveSignal),
		meanLatency:  desc(observe.AdaptiveLatencySeconds),
		scale:        desc(observe.BudgetScale),
		scaleSignal:  desc(observe.BudgetScaleSignal),
		scaleChanges: desc(observe.BudgetScaleChangesTotal),
	}
}

func addNamed[T any](mu *sync.Mutex, list *[]named[T], name string, v T) error {
	mu.Lock()
	defer mu.Unlock()
	for _, x := range *list {
		if x.name == name {
			return fmt.Errorf("metrics: %q is already watched", name)
		}
	}
	*list = append(*list, named[T]{name, v})
	return nil
}

// Describe implements prometheus.Collector.
func (w *watcher) Describe(ch chan<- *prometheus.Desc) {
	ch <- w.breaker
	ch <- w.entries
	ch <- w.evictions
	ch <- w.limit
	ch <- w.inFlight
	ch <- w.shed
	ch <- w.signal
	ch <- w.meanLatency
	ch <- w.scale
	ch <- w.scaleSignal
	ch <- w.scaleChanges
}

// Collect implements prometheus.Collector.
func (w *watcher) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	engines := append([]named[*core.Engine](nil), w.engines...)
	stores := append([]named[core.StoreStats](nil), w.stores...)
	limiters := append([]named[*adaptive.Limiter](nil), w.limiters...)
	scales := append([]named[*scale.Controller](nil), w.scales...)
	w.mu.Unlock()
	for _, c := range scales {
		s := c.v.Stats()
		ch <- prometheus.MustNewConstMetric(w.scale, prometheus.GaugeValue, s.Scale, c.name)
		ch <- prometheus.MustNewConstMetric(w.scaleSignal, prometheus.GaugeValue, s.Signal, c.name)
		ch <- prometheus.MustNewConstMetric(w.scaleChanges, prometheus.CounterValue, float64(s.Changes), c.name)
	}
	for _, l := range limiters {
		s := l.v.Stats()
		ch <- prometheus.MustNewConstMetric(w.limit, prometheus.GaugeValue, float64(s.Limit), l.name)
		ch <- prometheus.MustNewConstMetric(w.inFlight, prometheus.GaugeValue, float64(s.InFlight), l.name)
		for p, n := range s.Shed {
			ch <- prometheus.MustNewConstMetric(w.shed, prometheus.CounterValue, float64(n), l.name, adaptive.Priority(p).String())
		}
		ch <- prometheus.MustNewConstMetric(w.signal, prometheus.GaugeValue, s.Signal, l.name)
		ch <- prometheus.MustNewConstMetric(w.meanLatency, prometheus.GaugeValue, s.Latency.Seconds(), l.name, "mean")
		ch <- prometheus.MustNewConstMetric(w.meanLatency, prometheus.GaugeValue, s.NoLoad.Seconds(), l.name, "no_load")
	}
	for _, e := range engines {
		v := 0.0
		if e.v.BreakerOpen() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(w.breaker, prometheus.GaugeValue, v, e.name)
	}
	for _, s := range stores {
		ch <- prometheus.MustNewConstMetric(w.entries, prometheus.GaugeValue, float64(s.v.Len()), s.name)
		ch <- prometheus.MustNewConstMetric(w.evictions, prometheus.CounterValue, float64(s.v.Evictions()), s.name)
	}
}
