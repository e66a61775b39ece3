package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/quotagate/quotagate/core"
)

type layerSpec struct {
	name  string
	at    where
	use   []string
	cost  int64
	costs map[string]int64
	guard *guardSpec // the adaptive section (adaptive.go)
}

// LayerNames returns the names of the declared layers, in document order.
func (c *Document) LayerNames() []string {
	out := make([]string, len(c.layers))
	for i, l := range c.layers {
		out[i] = l.name
	}
	return out
}

// LayerOptions returns the core.LayerOption values of the named layer:
// core.Use with its budgets, and its costs.
func (c *Document) LayerOptions(name string) ([]core.LayerOption, bool) {
	for _, l := range c.layers {
		if l.name == name {
			opts := append(l.guardOptions(), core.Use(l.use...), core.Cost(l.cost))
			for _, b := range l.use {
				if n, ok := l.costs[b]; ok {
					opts = append(opts, core.CostIn(b, n))
				}
			}
			return opts, true
		}
	}
	return nil, false
}

// Layer creates the named layer on eng, with extra options (a denial
// renderer, a header style, cost functions) after the declared ones.
func (c *Document) Layer(eng *core.Engine, name string, extra ...core.LayerOption) (*core.Layer, error) {
	opts, ok := c.LayerOptions(name)
	if !ok {
		return nil, fmt.Errorf("policy: %s declares no layer %q", c.file, name)
	}
	return eng.Layer(append(opts, extra...)...)
}

// sameLayers reports whether c and o declare the same layers.
func (c *Document) sameLayers(o *Document) (string, bool) {
	if len(c.layers) != len(o.layers) {
		return "the set of layers", false
	}
	for i, l := range c.layers {
		m := o.layers[i]
		if l.name != m.name || !slices.Equal(l.use, m.use) || l.cost != m.cost || len(l.costs) != len(m.costs) || !l.sameGuard(m) {
			return fmt.Sprintf("layer %q", l.name), false
		}
		for k, v := range l.costs {
			if w, ok := m.costs[k]; !ok || w != v {
				return fmt.Sprintf("layer %q", l.name), false
			}
		}
	}
	return "", true
}

// layer decodes layer k from n: its adaptive limit, the budgets it uses
// (byName holds the document's) and its costs.
func (d *decoder) layer(k, n *node, byName map[string]*budgetSpec) *layerSpec {
	what := fmt.Sprintf("layer %q", k.text)
	if !d.fields(n, what, "use", "cost", "costs", "adaptive", "description") {
		return nil
	}
	l := &layerSpec{name: k.text, at: k.at, cost: 1, costs: map[string]int64{}}
	d.layerGuard(k.text, n.field("adaptive"), l)
	d.layerUse(k, n, what, l, byName)
	d.layerCost(k, n, l, byName)
	d.layerCosts(n, l, byName)
	return l
}

// layerUse reads the use list of layer k (what names it) into l: budgets
// the document declares, each once. A layer of an adaptive limit alone
// may leave it out.
func (d *decoder) layerUse(k, n *node, what string, l *layerSpec, byName map[string]*budgetSpec) {
	un := n.field("use")
	switch {
	case un == nil && n.field("adaptive") != nil: // a layer of an adaptive limit alone
	case un == nil:
		d.badf(k.at, "%s has no use list (the budgets it applies) and no adaptive section", what)
	case un.kind != kindSeq:
		d.badf(un.at, "use must be a list of budget names, not %s", un.kind)
	case len(un.items) == 0:
		d.badf(un.at, "use is empty")
	case len(un.items) > core.MaxBudgetsPerLayer:
		d.badf(un.at, "%d budgets exceed the maximum of %d per layer", len(un.items), core.MaxBudgetsPerLayer)
	default:
		for _, it := range un.items {
			v, ok := d.scalar(it, "a budget name")
			if !ok {
				continue
			}
			switch {
			case byName[v.text] == nil:
				d.fail(v, fmt.Errorf("unknown budget %q%s", v.text, didYouMean(v.text, slices.Collect(maps.Keys(byName)))))
			case slices.Contains(l.use, v.text):
				d.fail(v, fmt.Errorf("budget %q is listed twice", v.text))
			default:
				l.use = append(l.use, v.text)
			}
		}
	}
}

// layerCost reads the cost of layer k into l (default 1) and checks it
// against each budget the layer uses that has no cost of its own.
func (d *decoder) layerCost(k, n *node, l *layerSpec, byName map[string]*budgetSpec) {
	cost, at := int64(1), k.at
	if cn := n.field("cost"); cn != nil {
		x, ok := d.integer(cn, "cost", 0, core.MaxQuota)
		if !ok {
			return
		}
		l.cost, cost, at = x, x, cn.at
	}
	for _, b := range l.use {
		if _, own := n.field("costs").mapHas(b); !own {
			d.checkCost(at, byName[b], cost)
		}
	}
}

// layerCosts reads the costs of the layer's own budgets into l, each
// checked against its budget.
func (d *decoder) layerCosts(n *node, l *layerSpec, byName map[string]*budgetSpec) {
	cs := n.field("costs")
	if cs == nil {
		return
	}
	if cs.kind != kindMap {
		d.badf(cs.at, "costs must map budget names to costs, not %s", cs.kind)
		return
	}
	for i, bk := range cs.keys {
		x, ok := d.integer(cs.vals[i], fmt.Sprintf("the cost in %q", bk.text), 0, core.MaxQuota)
		if !slices.Contains(l.use, bk.text) {
			d.badf(bk.at, "a cost is set for budget %q, which the layer does not use", bk.text)
			continue
		}
		if ok {
			l.costs[bk.text] = x
			d.checkCost(cs.vals[i].at, byName[bk.text], x)
		}
	}
}

func (d *decoder) checkCost(at where, s *budgetSpec, cost int64) {
	if s == nil || !s.ok {
		return
	}
	if c := s.capacity(d.resolver); cost > c {
		how := "can ever hold"
		if s.quotaBy == ByTier {
			how = "holds in its smallest tier"
		}
		d.badf(at, "cost %d in budget %q exceeds what the budget %s (%d)", cost, s.b.Name, how, c)
	}
}

// checkLayers validates the configured budgets together and every layer
// on them, as core.New and Engine.Layer would, which reports anything the
// checks above missed.
func (d *decoder) checkLayers(cfg *Document) {
	for _, s := range cfg.budgets {
		if !s.ok {
			return
		}
	}
	for _, l := range cfg.layers {
		if len(l.use) == 0 && l.guard == nil {
			return
		}
	}
	budgets := cfg.Budgets()
	if err := core.ValidateBudgets(budgets); err != nil {
		d.badf(where{path: pathRoot(d.json)}, "%v", err)
		return
	}
	for _, l := range cfg.layers {
		opts, _ := cfg.LayerOptions(l.name)
		if err := core.ValidateLayer(budgets, opts...); err != nil {
			for _, p := range unwrapAll(err) {
				d.bad(l.at, p)
			}
		}
	}
}
