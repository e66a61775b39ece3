package policy

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
)

// A layer's adaptive section puts an adaptive concurrency limit
// (core/adaptive) in front of its budgets:
//
//	layers:
//	  api:
//	    use: [per_ip]            # optional with adaptive
//	    adaptive:
//	      initial: 20            # every field is optional
//	      min: 5
//	      max: 500
//	      tolerance: 1.25        # or 125%
//	      smoothing: 0.5
//	      samples: 10
//	      sample_every: 4
//	      normal_share: 90%
//	      sheddable_share: 50%
//	      max_retry_after: 10s
//	      priority: by_route     # a name in LoadConfig.Priorities
//	      signal: cpu            # a name in LoadConfig.Signals ...
//	      target: 0.8            # ... and the value to keep it at
//
// The limiter is created with the configuration and kept by a Reloader
// across reloads (layers are fixed at start-up, so a changed adaptive
// section is refused like any other change to a layer).

// adaptiveFields are the fields of a layer's adaptive section.
var adaptiveFields = []string{"name", "initial", "min", "max", "tolerance", "smoothing", "samples",
	"sample_every", "normal_share", "sheddable_share", "max_retry_after", "priority", "signal", "target"}

// guardSpec is a layer's adaptive section, decoded, and its limiter.
type guardSpec struct {
	text string // the decoded configuration, to compare on reload
	lim  *adaptive.Limiter
}

// layerGuard decodes the adaptive section n of the layer named name into
// l.
func (d *decoder) layerGuard(name string, n *node, l *layerSpec) {
	if n == nil || !d.fields(n, fmt.Sprintf("the adaptive section of layer %q", name), adaptiveFields...) {
		return
	}
	cfg := adaptive.Config{Name: name}
	ok := d.guardSettings(n, &cfg)
	prioName, sigName, good := d.guardFuncs(n, &cfg)
	ok = ok && good
	// Fields that failed to decode are left at their defaults, so the
	// limiter's own checks of the others are reported too.
	lim, err := adaptive.New(cfg)
	if err != nil {
		for _, p := range unwrapAll(err) {
			d.bad(n.at, p)
		}
		return
	}
	if !ok {
		return
	}
	cfg.Priority, cfg.Signal = nil, nil // compared by name
	l.guard = &guardSpec{text: fmt.Sprintf("%+v priority=%s signal=%s", cfg, prioName, sigName), lim: lim}
}

// guardSettings reads the adaptive section n's name, counts, shares and
// max_retry_after into cfg, and reports whether all of them decoded.
func (d *decoder) guardSettings(n *node, cfg *adaptive.Config) bool {
	ok := true
	integer := func(field string, dst *int64) {
		if v := n.field(field); v != nil {
			x, good := d.integer(v, field, 1, math.MaxInt32)
			*dst, ok = x, ok && good
		}
	}
	share := func(field string, dst *float64) {
		if v := n.field(field); v != nil {
			x, good := d.fraction(v, field)
			*dst, ok = x, ok && good
		}
	}
	if v := n.field("name"); v != nil {
		s, good := d.name(v, "name")
		cfg.Name, ok = s, ok && good
	}
	integer("initial", &cfg.Initial)
	integer("min", &cfg.Min)
	integer("max", &cfg.Max)
	integer("samples", &cfg.Samples)
	var every int64
	integer("sample_every", &every)
	cfg.SampleEvery = int(every)
	share("tolerance", &cfg.Tolerance)
	share("smoothing", &cfg.Smoothing)
	share("normal_share", &cfg.NormalShare)
	share("sheddable_share", &cfg.SheddableShare)
	if v := n.field("max_retry_after"); v != nil {
		x, good := d.duration(v, "max_retry_after")
		cfg.MaxRetryAfter, ok = x, ok && good
	}
	return ok
}

// guardFuncs reads the adaptive section n's priority function and load
// signal, by their names in the load configuration, and the signal's
// target into cfg. It returns the names and whether all of them decoded.
func (d *decoder) guardFuncs(n *node, cfg *adaptive.Config) (prioName, sigName string, ok bool) {
	ok = true
	if v := n.field("priority"); v != nil {
		s, good := named(d, v, "priority function", "Priorities", d.opts.Priorities)
		prioName, cfg.Priority, ok = s, d.opts.Priorities[s], ok && good
	}
	if v := n.field("signal"); v != nil {
		s, good := named(d, v, "signal", "Signals", d.opts.Signals)
		sigName, cfg.Signal, ok = s, d.opts.Signals[s], ok && good
	}
	if v := n.field("target"); v != nil {
		x, good := d.number(v, "target")
		cfg.Target, ok = x, ok && good
	}
	return prioName, sigName, ok
}

// fraction reads a share ("90%", "0.9", "9/10") as a float.
func (d *decoder) fraction(n *node, what string) (float64, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return 0, false
	}
	s, err := ParseShare(v.text)
	if err != nil {
		d.fail(v, fmt.Errorf("%s: %w", what, err))
		return 0, false
	}
	num, den := s.Fraction()
	return float64(num) / float64(den), true
}

// number reads a finite decimal number.
func (d *decoder) number(n *node, what string) (float64, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseFloat(v.text, 64)
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		d.fail(v, fmt.Errorf("%s %q is not a number", what, v.text))
		return 0, false
	}
	return x, true
}

// named reads a name that must be a key of known (a map of LoadConfig).
func named[V any](d *decoder, n *node, what, option string, known map[string]V) (string, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return "", false
	}
	if _, ok := known[v.text]; ok {
		return v.text, true
	}
	names := slices.Sorted(maps.Keys(known))
	msg := fmt.Sprintf("unknown %s %q%s", what, v.text, didYouMean(v.text, names))
	if len(names) == 0 {
		msg += fmt.Sprintf("; none were given (LoadConfig.%s)", option)
	} else {
		msg += "; known: " + strings.Join(names, ", ")
	}
	d.fail(v, errors.New(msg))
	return "", false
}

// guardOptions returns the layer option of l's adaptive limit, if any.
func (l *layerSpec) guardOptions() []core.LayerOption {
	if l.guard == nil {
		return nil
	}
	return []core.LayerOption{core.GuardBy(l.guard.lim)}
}

// sameGuard reports whether l and m have the same adaptive section.
func (l *layerSpec) sameGuard(m *layerSpec) bool {
	if l.guard == nil || m.guard == nil {
		return l.guard == m.guard
	}
	return l.guard.text == m.guard.text
}

// keepGuards makes c use the limiters of prev, the configuration c
// replaces with the same layers: the running layers hold prev's.
func (c *Document) keepGuards(prev *Document) {
	for i, l := range c.layers {
		if l.guard != nil && i < len(prev.layers) && prev.layers[i].guard != nil {
			l.guard.lim = prev.layers[i].guard.lim
		}
	}
}

// Adaptive returns the adaptive limit of the named layer, for metrics
// (core/metrics WatchAdaptive) or Stats; false when the layer has no
// adaptive section.
func (c *Document) Adaptive(layer string) (*adaptive.Limiter, bool) {
	for _, l := range c.layers {
		if l.name == layer && l.guard != nil {
			return l.guard.lim, true
		}
	}
	return nil, false
}
