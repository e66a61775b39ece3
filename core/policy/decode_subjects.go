package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/quotagate/quotagate/core"
)

// subjects reads the subjects section: who is in which tier, on which
// plan, with which overrides. A subject is named by its key as the
// budget's subject key function returns it (a tenant, a hashed API key, a
// subscriber).
func (d *decoder) subjects(root *node, budgets map[string]*budgetSpec) map[string]Subject {
	sn := root.field("subjects")
	if sn == nil || !d.isMap(sn, "subjects") {
		return nil
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(budgets)), func(s *budgetSpec) bool { return s.quotaBy != Flat }) {
		d.badf(sn.at, "subjects are assigned, but no budget has quota_by tier or plan (quota_by: tier), so none would use them")
	}
	out := make(map[string]Subject, len(sn.keys))
	for i, k := range sn.keys {
		if k.text == "" {
			d.badf(k.at, "a subject has an empty name")
			continue
		}
		if sub, ok := d.subject(k, sn.vals[i], budgets); ok {
			out[k.text] = sub
		}
	}
	return out
}

// subject decodes subject k from v, in the short form ("acme: pro", a
// tier) or as a mapping of tier, plan, cap and overrides. A subject given
// neither a tier nor a cap is in the fallback tier. It reports false when
// v is not a mapping of those fields.
func (d *decoder) subject(k, v *node, budgets map[string]*budgetSpec) (Subject, bool) {
	what := fmt.Sprintf("subject %q", k.text)
	var sub Subject
	if v.kind == kindScalar || v.kind == kindMap && v.field("env") != nil {
		// The short form, "acme: pro": a tier.
		if tv, ok := d.scalar(v, what); ok {
			sub.Tier = d.tierName(tv)
		}
		return sub, true
	}
	if !d.fields(v, what, "tier", "plan", "cap", "overrides") {
		return Subject{}, false
	}
	if len(v.keys) == 0 {
		d.badf(v.at, "%s assigns nothing: give a tier, a plan, a cap or overrides", what)
	}
	if tn := v.field("tier"); tn != nil {
		if tv, ok := d.scalar(tn, "tier"); ok {
			sub.Tier = d.tierName(tv)
		}
	}
	if pn := v.field("plan"); pn != nil {
		if pv, ok := d.scalar(pn, "plan"); ok {
			sub.Plan = d.planName(pv)
		}
	}
	if cn := v.field("cap"); cn != nil {
		if cn.kind == kindScalar && cn.text == "none" {
			sub.Cap = NoCap
		} else {
			sub.Cap, _ = d.integer(cn, "cap (or none)", 0, core.MaxQuota)
		}
	}
	if on := v.field("overrides"); on != nil && d.isMap(on, "overrides") {
		sub.Overrides = d.overrides(k, on, budgets)
	}
	if sub.Tier == "" && v.field("cap") == nil {
		// Neither pinned nor derived from a cap: the fallback tier,
		// as for a subject the file does not list.
		if t, ok := d.resolver.Tiers.fallbackTier(); ok {
			sub.Tier = t.Name
		}
	}
	return sub, true
}

// overrides reads subject k's overrides, on: a quota per budget, each for
// a by-tier or by-plan budget and one the engine can evaluate.
func (d *decoder) overrides(k, on *node, budgets map[string]*budgetSpec) map[string]int64 {
	out := make(map[string]int64, len(on.keys))
	for j, bk := range on.keys {
		q, ok := d.integer(on.vals[j], fmt.Sprintf("the override of %q", bk.text), 1, core.MaxQuota)
		if d.overridable(bk, budgets) && ok {
			if s := budgets[bk.text]; s.ok {
				d.checkQuota(s, q, on.vals[j].at, fmt.Sprintf("the override %d of subject %q", q, k.text))
			}
			out[bk.text] = q
		}
	}
	return out
}

// tierName checks that v names a tier the document declares.
func (d *decoder) tierName(v val) string {
	switch {
	case d.tierSet == nil:
		d.fail(v, fmt.Errorf("tier %q: no tiers are defined (tiers: {free: 100/min, pro: 1000/min})", v.text))
	case !slices.Contains(d.tierSet, v.text):
		d.fail(v, fmt.Errorf("unknown tier %q%s; defined: %s", v.text, didYouMean(v.text, d.tierSet), strings.Join(d.tierSet, ", ")))
	default:
		return v.text
	}
	return ""
}

// planName checks that v names a defined plan.
func (d *decoder) planName(v val) string {
	p := d.resolver.Plans
	if p.Has(v.text) {
		return v.text
	}
	if p == nil {
		d.fail(v, fmt.Errorf("plan %q: no plans are defined (plans: {pro: {email_send: 500}})", v.text))
		return ""
	}
	names := slices.Sorted(maps.Keys(p.m))
	d.fail(v, fmt.Errorf("unknown plan %q%s; defined: %s", v.text, didYouMean(v.text, names), strings.Join(names, ", ")))
	return ""
}

// overridable reports whether the budget k names takes overrides.
func (d *decoder) overridable(k *node, budgets map[string]*budgetSpec) bool {
	s := budgets[k.text]
	switch {
	case s == nil:
		d.badf(k.at, "unknown budget %q%s", k.text, didYouMean(k.text, slices.Collect(maps.Keys(budgets))))
		return false
	case s.quotaBy == Flat:
		d.badf(k.at, "budget %q is flat, so an override would never apply; overrides apply to budgets with quota_by tier or plan", k.text)
		return false
	}
	return true
}
