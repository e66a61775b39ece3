package observe

import (
	"time"

	"github.com/quotagate/quotagate/core"
)

// Multi returns an observer that passes every event to each of obs, in
// order. Nil observers are left out and nested Multi observers are
// flattened. With no observer left it returns nil (an engine without an
// observer does not time its store calls); with one, that observer itself.
// A typed nil pointer (a nil *Logger in a core.Observer) is not nil and is
// kept. The observer returned for several also implements
// [core.EvictionObserver] and [core.LeaseObserver], passing evictions and
// lease events to those of obs that do, so the same value can be given to
// core.Config, memstore.Config and redisstore.Config.
func Multi(obs ...core.Observer) core.Observer {
	var m multi
	for _, o := range obs {
		switch x := o.(type) {
		case nil:
		case multi:
			m = append(m, x...)
		default:
			m = append(m, o)
		}
	}
	switch len(m) {
	case 0:
		return nil
	case 1:
		return m[0]
	}
	return m
}

type multi []core.Observer

func (m multi) ObserveDecision(r *core.Request, d *core.Decision, layer []core.Result, storeLatency time.Duration) {
	for _, o := range m {
		o.ObserveDecision(r, d, layer, storeLatency)
	}
}

func (m multi) ObserveError(kind core.ErrorKind, budget string, err error) {
	for _, o := range m {
		o.ObserveError(kind, budget, err)
	}
}

// ObserveEviction implements [core.EvictionObserver] for the observers
// that implement it.
func (m multi) ObserveEviction(budget string) {
	for _, o := range m {
		if eo, ok := o.(core.EvictionObserver); ok {
			eo.ObserveEviction(budget)
		}
	}
}

// ObserveLease implements [core.LeaseObserver] for the observers that
// implement it.
func (m multi) ObserveLease(budget string, event core.LeaseEvent, units int64) {
	for _, o := range m {
		if lo, ok := o.(core.LeaseObserver); ok {
			lo.ObserveLease(budget, event, units)
		}
	}
}
