// Package otelmetrics records what a quotagate engine decides through the
// OpenTelemetry metric API (go.opentelemetry.io/otel/metric), for services
// that export through OpenTelemetry rather than a Prometheus registry. It is
// the only quotagate package that imports OpenTelemetry.
//
// [New] returns an [Observer], a [core.Observer] to put in the engine's
// configuration (alone, or with others through observe.Multi). It records
// the metrics of package core/metrics, under the same names and with the
// same attributes and values, so one dashboard serves both:
//
//	quotagate_decisions_total{budget,outcome}   Int64Counter
//	quotagate_near_limit_total{budget}          Int64Counter
//	quotagate_refunds_total{budget}             Int64Counter
//	quotagate_fallback_total{budget}            Int64Counter
//	quotagate_budget_errors_total{budget,kind}  Int64Counter; kind: no_key, other
//	quotagate_store_errors_total{kind}          Int64Counter; kind: error, timeout, canceled, breaker_open, misconfigured
//	quotagate_store_latency_seconds{result}     Float64Histogram (unit s); result: ok, error
//	quotagate_breaker_open{engine}              Int64ObservableGauge ([Observer.WatchEngine])
//	quotagate_memory_store_entries{store}       Int64ObservableGauge ([Observer.WatchMemoryStore])
//	quotagate_memory_store_evictions_total{store} Int64ObservableCounter
//	quotagate_adaptive_limit{limiter}           Int64ObservableGauge ([Observer.WatchAdaptive])
//	quotagate_adaptive_in_flight{limiter}       Int64ObservableGauge
//	quotagate_adaptive_shed_total{limiter,priority} Int64ObservableCounter
//	quotagate_adaptive_signal{limiter}          Float64ObservableGauge
//	quotagate_adaptive_latency_seconds{limiter,kind} Float64ObservableGauge; kind: mean, no_load
//	quotagate_budget_scale{budget}              Float64ObservableGauge ([Observer.WatchScale])
//	quotagate_budget_scale_signal{budget}       Float64ObservableGauge
//	quotagate_budget_scale_changes_total{budget} Int64ObservableCounter
//	quotagate_memory_evictions_total{budget}    Int64Counter ([Observer.ObserveEviction], as a memory store's observer)
//	quotagate_leases_total{budget,event}        Int64Counter ([Observer.ObserveLease], as a Redis store's observer);
//	                                            event: taken, returned, expired
//	quotagate_lease_units_total{budget,event}   Int64Counter; event: taken, returned, expired, stranded
//	quotagate_lease_decisions_total{budget,served} Int64Counter; served: local, store
//
// Each instrument's name, description, kind and attributes are defined
// once, in package core/observe (observe.AllSeries), which core/metrics
// reads too.
//
// The names keep Prometheus's _total and _seconds suffixes, so an
// exporter that adds them must be told not to (the OTel Prometheus
// exporter's WithoutCounterSuffixes and WithoutUnits), or the names carry
// them once more. Attributes never include a partition key, and at most
// [Config].MaxBudgets budget names become attribute values (the rest are
// "_other"), so the number of series is fixed by the configuration.
//
// # Traces
//
// When a request's context carries a recording span, the layer that denies
// the request adds the event "quotagate.denied" to it (attributes
// quotagate.budget, quotagate.reason, quotagate.retry_after_seconds), and a
// layer whose store call failed adds "quotagate.store_error"
// (quotagate.error.kind, exception.message).
//
// Observing an allowed decision does not allocate: each budget's
// attribute sets are built once and cached.
package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/scale"
)

// OtherBudget is the budget attribute of budgets beyond [Config].MaxBudgets.
const OtherBudget = "_other"

// ScopeName is the instrumentation scope name of the meter New uses.
const ScopeName = "github.com/quotagate/quotagate/core/otelmetrics"

// DefaultLatencyBuckets are the store latency histogram's bucket
// boundaries in seconds, a copy of observe.StoreLatencySeconds.Buckets
// (those of core/metrics).
var DefaultLatencyBuckets = slices.Clone(observe.StoreLatencySeconds.Buckets)

// Config configures [New]. The zero value is usable.
type Config struct {
	// Namespace prefixes every instrument name. Default "quotagate".
	Namespace string
	// MaxBudgets caps the number of distinct budget attribute values;
	// budgets beyond it share budget="_other". Default 64.
	MaxBudgets int
	// NearLimit is the share of a budget's capacity at or above which an
	// allowed request counts in near_limit_total (see observe.NearLimit).
	// Default 0.8. Negative disables the count. Must be at most 1.
	NearLimit float64
	// LatencyBuckets are the store latency histogram's bucket boundaries
	// in seconds. Default DefaultLatencyBuckets.
	LatencyBuckets []float64
}

// Observer is a [core.Observer] recording through OpenTelemetry. It is
// safe for concurrent use.
type Observer struct {
	near float64
	max  int

	decisions, nearLimit, refunds, fallback, budgetErrors, storeErrors metric.Int64Counter
	latency                                                            metric.Float64Histogram
	budgetEvictions, leases, leaseUnits, leaseDecisions                metric.Int64Counter

	// Options are kept as one-element slices and passed with ..., so a
	// measurement does not allocate a variadic slice.
	storeErrOpts [core.NumStoreErrorKinds][]metric.AddOption
	latencyOpts  [2][]metric.RecordOption // ok, error

	mu       sync.Mutex // serialises adding budgets and watched objects
	budgets  atomic.Pointer[map[string]*budgetAttrs]
	other    atomic.Pointer[budgetAttrs]
	engines  []named[*core.Engine]
	stores   []named[core.StoreStats]
	limiters []named[*adaptive.Limiter]
	scales   []named[*scale.Controller]
}

type named[T any] struct {
	name string
	v    T
}

// budgetAttrs are one budget's measurement options, built once.
type budgetAttrs struct {
	outcomes         [observe.NumVerdicts][]metric.AddOption
	budget           []metric.AddOption
	noKey, otherErrs []metric.AddOption
}

// New creates the instruments on a meter of mp named [ScopeName] and
// returns the observer that records them. Use the global provider with
// otel.GetMeterProvider().
func New(mp metric.MeterProvider, cfg Config) (*Observer, error) {
	cfg = withDefaults(cfg)
	if err := checkConfig(mp, cfg); err != nil {
		return nil, err
	}
	meter := mp.Meter(ScopeName)
	ns := cfg.Namespace + "_"
	o := &Observer{near: cfg.NearLimit, max: cfg.MaxBudgets}
	errs := o.createRecorders(meter, ns, cfg.LatencyBuckets)
	g, gaugeErrs := newGauges(meter, ns)
	if err := errors.Join(append(errs, gaugeErrs...)...); err != nil {
		return nil, fmt.Errorf("otelmetrics: %w", err)
	}
	_, err := meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		o.collect(g, ob)
		return nil
	}, g.breaker, g.entries, g.evictions, g.limit, g.inFlight, g.shed, g.signal, g.meanLatency,
		g.scale, g.scaleSignal, g.scaleChanges)
	if err != nil {
		return nil, fmt.Errorf("otelmetrics: %w", err)
	}
	o.buildFixedOptions()
	return o, nil
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

// checkConfig returns a [core.ConfigError] listing every problem with mp
// and cfg (after defaults), or nil.
func checkConfig(mp metric.MeterProvider, cfg Config) error {
	var problems []error
	if mp == nil {
		problems = append(problems, errors.New("otelmetrics: no meter provider"))
	}
	if cfg.MaxBudgets < 0 {
		problems = append(problems, fmt.Errorf("otelmetrics: max budgets %d is negative", cfg.MaxBudgets))
	}
	if cfg.NearLimit > 1 {
		problems = append(problems, fmt.Errorf("otelmetrics: near-limit share %v is above 1", cfg.NearLimit))
	}
	if len(problems) > 0 {
		return &core.ConfigError{Problems: problems}
	}
	return nil
}

// createRecorders creates the counters and the store latency histogram
// that o records into synchronously, and returns the errors of creating
// them (nil where one succeeded).
func (o *Observer) createRecorders(meter metric.Meter, ns string, buckets []float64) []error {
	var errs []error
	counter := func(s observe.Series) metric.Int64Counter {
		c, err := meter.Int64Counter(ns+s.Name, metric.WithDescription(s.Help), metric.WithUnit(s.Unit))
		errs = append(errs, err)
		return c
	}
	o.decisions = counter(observe.DecisionsTotal)
	o.nearLimit = counter(observe.NearLimitTotal)
	o.refunds = counter(observe.RefundsTotal)
	o.fallback = counter(observe.FallbackTotal)
	o.budgetErrors = counter(observe.BudgetErrorsTotal)
	o.storeErrors = counter(observe.StoreErrorsTotal)
	o.budgetEvictions = counter(observe.MemoryEvictionsTotal)
	o.leases = counter(observe.LeasesTotal)
	o.leaseUnits = counter(observe.LeaseUnitsTotal)
	o.leaseDecisions = counter(observe.LeaseDecisionsTotal)
	sl := observe.StoreLatencySeconds
	var err error
	o.latency, err = meter.Float64Histogram(ns+sl.Name, metric.WithDescription(sl.Help), metric.WithUnit(sl.Unit),
		metric.WithExplicitBucketBoundaries(buckets...))
	return append(errs, err)
}

// gauges are the observable instruments, read at each collection from the
// watched engines, memory stores, adaptive limits and scales.
type gauges struct {
	breaker, entries, limit, inFlight       metric.Int64ObservableGauge
	evictions, shed, scaleChanges           metric.Int64ObservableCounter
	signal, meanLatency, scale, scaleSignal metric.Float64ObservableGauge
}

// newGauges creates the observable instruments and returns them with the
// errors of creating them (nil where one succeeded).
func newGauges(meter metric.Meter, ns string) (*gauges, []error) {
	var errs []error
	intGauge := func(s observe.Series) metric.Int64ObservableGauge {
		i, err := meter.Int64ObservableGauge(ns+s.Name, metric.WithDescription(s.Help), metric.WithUnit(s.Unit))
		errs = append(errs, err)
		return i
	}
	intCounter := func(s observe.Series) metric.Int64ObservableCounter {
		i, err := meter.Int64ObservableCounter(ns+s.Name, metric.WithDescription(s.Help), metric.WithUnit(s.Unit))
		errs = append(errs, err)
		return i
	}
	floatGauge := func(s observe.Series) metric.Float64ObservableGauge {
		i, err := meter.Float64ObservableGauge(ns+s.Name, metric.WithDescription(s.Help), metric.WithUnit(s.Unit))
		errs = append(errs, err)
		return i
	}
	g := &gauges{
		breaker:      intGauge(observe.BreakerOpen),
		entries:      intGauge(observe.MemoryStoreEntries),
		evictions:    intCounter(observe.MemoryStoreEvictionsTotal),
		limit:        intGauge(observe.AdaptiveLimit),
		inFlight:     intGauge(observe.AdaptiveInFlight),
		shed:         intCounter(observe.AdaptiveShedTotal),
		signal:       floatGauge(observe.AdaptiveSignal),
		meanLatency:  floatGauge(observe.AdaptiveLatencySeconds),
		scale:        floatGauge(observe.BudgetScale),
		scaleSignal:  floatGauge(observe.BudgetScaleSignal),
		scaleChanges: intCounter(observe.BudgetScaleChangesTotal),
	}
	return g, errs
}

// collect observes the current state of every watched adaptive limit,
// scale, engine and memory store into g's instruments.
func (o *Observer) collect(g *gauges, ob metric.Observer) {
	o.mu.Lock()
	engines, stores, limiters, scales := o.engines, o.stores, o.limiters, o.scales
	o.mu.Unlock()
	for _, c := range scales {
		s := c.v.Stats()
		a := metric.WithAttributes(attribute.String("budget", c.name))
		ob.ObserveFloat64(g.scale, s.Scale, a)
		ob.ObserveFloat64(g.scaleSignal, s.Signal, a)
		ob.ObserveInt64(g.scaleChanges, s.Changes, a)
	}
	for _, l := range limiters {
		s := l.v.Stats()
		name := attribute.String("limiter", l.name)
		a := metric.WithAttributes(name)
		ob.ObserveInt64(g.limit, s.Limit, a)
		ob.ObserveInt64(g.inFlight, s.InFlight, a)
		for p, n := range s.Shed {
			ob.ObserveInt64(g.shed, n, metric.WithAttributes(name, attribute.String("priority", adaptive.Priority(p).String())))
		}
		ob.ObserveFloat64(g.signal, s.Signal, a)
		ob.ObserveFloat64(g.meanLatency, s.Latency.Seconds(), metric.WithAttributes(name, attribute.String("kind", "mean")))
		ob.ObserveFloat64(g.meanLatency, s.NoLoad.Seconds(), metric.WithAttributes(name, attribute.String("kind", "no_load")))
	}
	for _, e := range engines {
		v := int64(0)
		if e.v.BreakerOpen() {
			v = 1
		}
		ob.ObserveInt64(g.breaker, v, metric.WithAttributes(attribute.String("engine", e.name)))
	}
	for _, s := range stores {
		a := metric.WithAttributes(attribute.String("store", s.name))
		ob.ObserveInt64(g.entries, int64(s.v.Len()), a)
		ob.ObserveInt64(g.evictions, int64(s.v.Evictions()), a)
	}
}

// buildFixedOptions builds the measurement options that do not depend on
// a budget (store error kinds and latency results), and the empty budget
// map.
func (o *Observer) buildFixedOptions() {
	for k, v := range observe.StoreLabels {
		o.storeErrOpts[k] = addOpts(attribute.NewSet(attribute.String("kind", v)))
	}
	o.latencyOpts[0] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ok")))}
	o.latencyOpts[1] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "error")))}
	empty := map[string]*budgetAttrs{}
	o.budgets.Store(&empty)
}

// MustNew is New for a configuration known to be valid; it panics on error.
func MustNew(mp metric.MeterProvider, cfg Config) *Observer {
	o, err := New(mp, cfg)
	if err != nil {
		panic(err)
	}
	return o
}

// WatchEngine records eng's circuit-breaker state as
// breaker_open{engine=name}, read at each collection. Names must be unique
// per Observer.
func (o *Observer) WatchEngine(name string, eng *core.Engine) error {
	if eng == nil {
		return errors.New("otelmetrics: watch engine: nil engine")
	}
	return watch(o, &o.engines, "engine", name, eng)
}

// WatchMemoryStore records s's number of keys as
// memory_store_entries{store=name} and its evictions as
// memory_store_evictions_total{store=name}, read at each collection. s is
// a memstore.Store, or any store that reports those numbers. Names must
// be unique per Observer.
func (o *Observer) WatchMemoryStore(name string, s core.StoreStats) error {
	if s == nil {
		return errors.New("otelmetrics: watch memory store: nil store")
	}
	return watch(o, &o.stores, "memory store", name, s)
}

// WatchAdaptive records the state of an adaptive limit (core/adaptive) as
// the adaptive_* instruments with limiter=name, read at each collection.
// Names must be unique per Observer.
func (o *Observer) WatchAdaptive(name string, l *adaptive.Limiter) error {
	if l == nil {
		return errors.New("otelmetrics: watch adaptive: nil limiter")
	}
	return watch(o, &o.limiters, "adaptive limit", name, l)
}

// WatchScale records the state of a budget's scale (a core/scale
// Controller) as the budget_scale* instruments with budget=name, read at
// each collection: the budget's name, or, for a Controller that scales
// several budgets, a name of its own. Names must be unique per Observer.
func (o *Observer) WatchScale(name string, c *scale.Controller) error {
	if c == nil {
		return errors.New("otelmetrics: watch scale: nil controller")
	}
	return watch(o, &o.scales, "scale", name, c)
}

// watch adds v to the watched list under name, unique in the list. The
// list is copied on write: the collection callback reads it unlocked.
func watch[T any](o *Observer, list *[]named[T], what, name string, v T) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, x := range *list {
		if x.name == name {
			return fmt.Errorf("otelmetrics: %s %q is already watched", what, name)
		}
	}
	*list = append((*list)[:len(*list):len(*list)], named[T]{name, v})
	return nil
}

func addOpts(s attribute.Set) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(s)}
}

func newBudgetAttrs(label string) *budgetAttrs {
	b := attribute.String("budget", label)
	a := &budgetAttrs{
		budget:    addOpts(attribute.NewSet(b)),
		noKey:     addOpts(attribute.NewSet(b, attribute.String("kind", "no_key"))),
		otherErrs: addOpts(attribute.NewSet(b, attribute.String("kind", "other"))),
	}
	for i := range a.outcomes {
		a.outcomes[i] = addOpts(attribute.NewSet(b, attribute.String("outcome", observe.Verdict(i).String())))
	}
	return a
}

// budget returns the named budget's options, adding them on first use.
func (o *Observer) budget(name string) *budgetAttrs {
	bs := *o.budgets.Load()
	if a := bs[name]; a != nil {
		return a
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	bs = *o.budgets.Load()
	if a := bs[name]; a != nil {
		return a
	}
	if len(bs) >= o.max {
		if a := o.other.Load(); a != nil {
			return a
		}
		a := newBudgetAttrs(OtherBudget)
		o.other.Store(a)
		return a
	}
	next := make(map[string]*budgetAttrs, len(bs)+1)
	for k, v := range bs {
		next[k] = v
	}
	a := newBudgetAttrs(name)
	next[name] = a
	o.budgets.Store(&next)
	return a
}

// ObserveEviction implements [core.EvictionObserver]: give the Observer
// (alone or through observe.Multi) to memstore.Config.Observer to count
// a memory store's evictions per budget in memory_evictions_total.
func (o *Observer) ObserveEviction(budget string) {
	o.budgetEvictions.Add(context.Background(), 1, o.budget(budget).budget...)
}

// ObserveLease implements [core.LeaseObserver]: give the Observer (alone
// or through observe.Multi) to redisstore.Config.Observer to count what
// the store's leases do in leases_total, lease_units_total and
// lease_decisions_total, as package core/metrics does.
func (o *Observer) ObserveLease(budget string, event core.LeaseEvent, units int64) {
	ctx := context.Background()
	b := attribute.String("budget", o.budgetLabel(budget))
	switch event {
	case core.LeaseTaken, core.LeaseReturned, core.LeaseExpired:
		ev := metric.WithAttributes(b, attribute.String("event", event.String()))
		o.leases.Add(ctx, 1, ev)
		o.leaseUnits.Add(ctx, units, ev)
	case core.LeaseStranded:
		o.leaseUnits.Add(ctx, units, metric.WithAttributes(b, attribute.String("event", event.String())))
	case core.LeaseServedLocal:
		o.leaseDecisions.Add(ctx, units, metric.WithAttributes(b, attribute.String("served", "local")))
	case core.LeaseServedStore:
		o.leaseDecisions.Add(ctx, units, metric.WithAttributes(b, attribute.String("served", "store")))
	}
}

// budgetLabel returns the attribute value of budget: its name, or
// OtherBudget past MaxBudgets.
func (o *Observer) budgetLabel(budget string) string {
	if o.budget(budget) == o.other.Load() {
		return OtherBudget
	}
	return budget
}

// ObserveDecision implements [core.Observer].
func (o *Observer) ObserveDecision(r *core.Request, d *core.Decision, layer []core.Result, storeLatency time.Duration) {
	ctx := context.Background()
	if r != nil && r.Context != nil {
		ctx = r.Context
	}
	if len(layer) == 0 {
		if oc, ok := observe.DeniedBeforeStore(d, layer); ok && d.DeniedBy != "" {
			o.decisions.Add(ctx, 1, o.budget(d.DeniedBy).outcomes[oc]...)
			o.spanDenied(ctx, d)
		}
		return
	}
	failed, unavailable := false, false
	for i := range layer {
		res := &layer[i]
		a := o.budget(res.Budget)
		oc := observe.Classify(d, res)
		o.decisions.Add(ctx, 1, a.outcomes[oc]...)
		if oc == observe.FailedOpen || oc == observe.FailedClosed {
			failed = true
		}
		if res.Unavailable {
			unavailable = true
		}
		if res.Local {
			failed = true
			o.fallback.Add(ctx, 1, a.budget...)
		}
		if o.near > 0 && observe.NearLimit(d, res, o.near) {
			o.nearLimit.Add(ctx, 1, a.budget...)
		}
		if res.Refunded {
			o.refunds.Add(ctx, 1, a.budget...)
		}
	}
	if storeLatency > 0 {
		switch {
		case !failed:
			o.latency.Record(ctx, storeLatency.Seconds(), o.latencyOpts[0]...)
		case !errors.Is(d.Err, core.ErrBreakerOpen):
			o.latency.Record(ctx, storeLatency.Seconds(), o.latencyOpts[1]...)
		}
	}
	if unavailable && d.Err != nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("quotagate.store_error", trace.WithAttributes(
				attribute.String("quotagate.error.kind", core.ClassifyStoreError(d.Err).String()),
				attribute.String("exception.message", d.Err.Error()),
			))
		}
	}
	if observe.LayerDenied(d, layer) {
		o.spanDenied(ctx, d)
	}
}

// spanDenied adds the denial event to the request's span, if it records.
func (o *Observer) spanDenied(ctx context.Context, d *core.Decision) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("quotagate.denied", trace.WithAttributes(
		attribute.String("quotagate.budget", d.DeniedBy),
		attribute.String("quotagate.reason", d.Reason.String()),
		attribute.Float64("quotagate.retry_after_seconds", d.RetryAfter.Seconds()),
	))
}

// ObserveError implements [core.Observer].
func (o *Observer) ObserveError(kind core.ErrorKind, budget string, _ error) {
	ctx := context.Background()
	switch {
	case kind.IsStore():
		o.storeErrors.Add(ctx, 1, o.storeErrOpts[kind]...)
	case kind == core.KindMissingKey:
		o.budgetErrors.Add(ctx, 1, o.budget(budget).noKey...)
	default:
		o.budgetErrors.Add(ctx, 1, o.budget(budget).otherErrs...)
	}
}
