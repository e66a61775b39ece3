package policy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/core"
)

// tiers decodes root's tiers and tier_fallback. It returns the tiers (nil
// when there are none, or problems) and where they are (nil when absent).
func (d *decoder) tiers(root *node) (*Tiers, *where) {
	tn := root.field("tiers")
	fb := root.field("tier_fallback")
	if tn == nil {
		if fb != nil {
			d.badf(fb.at, "tier_fallback is set but no tiers are defined")
		}
		return nil, nil
	}
	if !d.isMap(tn, "tiers") {
		return nil, nil
	}
	if len(tn.keys) == 0 {
		d.badf(tn.at, "tiers is empty")
		return nil, nil
	}
	before := len(d.probs)
	var list []Tier
	caps := tierCaps{upTo: map[int64]string{}}
	names := map[string]bool{}
	for i, k := range tn.keys {
		names[k.text] = true
		d.tierSet = append(d.tierSet, k.text)
		if t, ok := d.tier(k, tn.vals[i], &caps); ok {
			list = append(list, t)
		}
	}
	fallback := d.tierFallback(fb, names)
	if len(d.probs) > before {
		return nil, &tn.at
	}
	t, err := NewTiers(list, fallback)
	if err != nil {
		d.bad(tn.at, err)
		return nil, &tn.at
	}
	return t, &tn.at
}

// tierCaps are the up_to caps of the tiers decoded so far, with the tier
// of each, and the top tier: the one that gives none.
type tierCaps struct {
	upTo map[int64]string
	top  *node
}

// tier decodes tier k from v, in the short form ("free: 100/min",
// "small: 25%") or as a mapping of share or quota, up_to and pinned_only.
// It reports false when v is not a mapping of those fields.
func (d *decoder) tier(k, v *node, caps *tierCaps) (Tier, bool) {
	what := fmt.Sprintf("tier %q", k.text)
	t := Tier{Name: k.text}
	if v.kind == kindScalar || v.kind == kindMap && v.field("env") != nil {
		// The short form, "free: 100/min" or "small: 25%": a tier
		// subjects are assigned to, never derived from a cap.
		if sv, ok := d.scalar(v, what); ok {
			d.tierValue(&t, sv)
		}
		t.PinnedOnly = true
		return t, true
	}
	if !d.fields(v, what, "share", "quota", "up_to", "pinned_only") {
		return Tier{}, false
	}
	sn, qn := v.field("share"), v.field("quota")
	switch {
	case sn == nil && qn == nil:
		d.badf(k.at, "%s has no share (share: 25%%) and no quota (quota: 100/min)", what)
	case sn != nil && qn != nil:
		d.badf(qn.at, "%s has both a share and a quota; give one", what)
	case sn != nil:
		if sv, ok := d.scalar(sn, "share"); ok {
			t.Share = d.share(sv)
		}
	default:
		if qv, ok := d.scalar(qn, "quota"); ok {
			t.Quota, t.Window = d.rate(qv)
		}
	}
	if pn := v.field("pinned_only"); pn != nil {
		t.PinnedOnly, _ = d.boolean(pn, "pinned_only")
	}
	d.tierCap(k, v.field("up_to"), what, &t, caps)
	return t, true
}

// tierCap reads the up_to of tier k (un, nil when absent; what names the
// tier) into t, and records it in caps: no two tiers have the same cap, a
// pinned_only tier has none, and only one tier, the top, leaves it out.
func (d *decoder) tierCap(k, un *node, what string, t *Tier, caps *tierCaps) {
	if un == nil {
		if !t.PinnedOnly {
			if caps.top != nil {
				d.badf(k.at, "%s and tier %q both have no up_to; only the top tier (caps above every other, and no cap) may leave it out", what, caps.top.text)
			}
			caps.top = k
		}
		return
	}
	n, ok := d.integer(un, "up_to", 0, core.MaxQuota)
	switch {
	case !ok:
	case t.PinnedOnly:
		d.badf(un.at, "%s is pinned_only, so it is never derived and takes no up_to", what)
	case n == 0:
		d.badf(un.at, "up_to 0: leave up_to out for the top tier (caps above every other tier, and no cap)")
	default:
		if other, dup := caps.upTo[n]; dup {
			d.badf(un.at, "%s has the same up_to %d as tier %q", what, n, other)
		}
		caps.upTo[n] = k.text
		t.UpTo = n
	}
}

// tierFallback reads tier_fallback (fb, nil when absent): the name of one
// of the tiers, names.
func (d *decoder) tierFallback(fb *node, names map[string]bool) string {
	if fb == nil {
		return ""
	}
	v, ok := d.scalar(fb, "tier_fallback")
	if !ok {
		return ""
	}
	if !names[v.text] {
		d.fail(v, fmt.Errorf("tier_fallback %q is not a defined tier", v.text))
		return ""
	}
	return v.text
}

// tierValue reads the short form of a tier: a quota ("100/min") or a
// share ("25%").
func (d *decoder) tierValue(t *Tier, v val) {
	q, w, err := ParseRate(v.text)
	switch {
	case err == nil:
		t.Quota, t.Window = q, w
	case isRate(v.text):
		d.fail(v, err)
	default:
		if n, ierr := strconv.ParseInt(v.text, 10, 64); ierr == nil {
			d.fail(v, fmt.Errorf("tier %q: %d is neither a quota nor a share: write %d/min for a quota, or %d%% for a share of the reference quota", t.Name, n, n, n))
			return
		}
		t.Share = d.share(v)
	}
}

// share reads a tier's share.
func (d *decoder) share(v val) Share {
	sh, err := ParseShare(v.text)
	if n, ierr := strconv.ParseInt(v.text, 10, 64); ierr == nil && n > 1 {
		err = fmt.Errorf("share %q is ambiguous: write %d%% for a percentage, or %d/1 for %d times the reference", v.text, n, n, n)
	}
	if err != nil {
		d.fail(v, err)
	}
	return sh
}

// rate reads a tier's quota.
func (d *decoder) rate(v val) (int64, time.Duration) {
	q, w, err := ParseRate(v.text)
	if err != nil {
		d.fail(v, err)
	}
	return q, w
}

type planRef struct {
	plan, budget string
	at           where
}

func (d *decoder) plans(root *node) (*Plans, []planRef) {
	pn := root.field("plans")
	if pn == nil || !d.isMap(pn, "plans") {
		return nil, nil
	}
	m := map[string]map[string]int64{}
	var refs []planRef
	for i, k := range pn.keys {
		v := pn.vals[i]
		if v.kind != kindMap {
			d.badf(v.at, "plan %q must map budget names to increases (email_send: 500), not %s", k.text, v.kind)
			continue
		}
		incs := map[string]int64{}
		for j, bk := range v.keys {
			if n, ok := d.integer(v.vals[j], fmt.Sprintf("the increase of plan %q for %q", k.text, bk.text), 0, core.MaxQuota); ok {
				incs[bk.text] = n
			}
			refs = append(refs, planRef{plan: k.text, budget: bk.text, at: bk.at})
		}
		m[k.text] = incs
	}
	p, err := NewPlans(m)
	if err != nil {
		d.bad(pn.at, err)
		return nil, refs
	}
	return p, refs
}
