package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/quotagate/quotagate/core"
)

type budgetSpec struct {
	b       core.Budget
	quotaBy QuotaBy
	scale   *scaleSpec // the scale section, if any
	subject core.KeyFunc
	at      where
	ok      bool
	// quotaOfTier: the budget gives no quota; its Quota is the fallback
	// tier's.
	quotaOfTier bool
}

var budgetFields = []string{"algorithm", "quota", "window", "lease", "burst", "max_wait", "key", "key_class",
	"missing_key", "fallback_key", "ignore_methods", "quota_by", "scaling", "subject", "shadow", "failure_mode", "leasing", "scale", "description"}

// budget decodes budget k from n, reporting each problem, and gives it a
// quota function when its quota is by tier or plan (tiers at tiersAt, nil
// when none).
func (d *decoder) budget(k, n *node, res *Resolver, tiersAt *where) *budgetSpec {
	s := &budgetSpec{at: k.at}
	s.b.Name = k.text
	before := len(d.probs)
	if !d.fields(n, fmt.Sprintf("budget %q", k.text), budgetFields...) {
		return s
	}
	b := &s.b
	hasQuota := d.budgetRate(k, n, b)
	d.budgetKeys(k, n, b)
	d.budgetHandling(n, b)
	d.budgetQuotaBy(k, n, s, tiersAt)
	if !hasQuota {
		d.quotaOfTier(s, k)
	}
	d.budgetSubject(n, s)
	d.budgetScale(k, n, s)
	s.ok = len(d.probs) == before
	if s.ok {
		s.ok = d.budgetProblems(k, n, *b)
	}
	if s.ok && s.quotaBy != Flat {
		b.QuotaFunc = res.QuotaFunc(b.Name, s.quotaBy, b.Quota, s.subject)
	}
	return s
}

// budgetRate reads what budget k counts and how fast into b: algorithm,
// quota, window (or a concurrency budget's lease), burst and max_wait. It
// reports whether n gives a quota.
func (d *decoder) budgetRate(k, n *node, b *core.Budget) bool {
	if an := n.field("algorithm"); an != nil {
		if v, ok := d.scalar(an, "algorithm"); ok {
			a, err := core.ParseAlgorithm(v.text)
			if err != nil {
				d.fail(v, err)
			}
			b.Algorithm = a
		}
	}
	qn := n.field("quota")
	if qn != nil {
		b.Quota, _ = d.integer(qn, "quota", 1, core.MaxQuota)
	}
	if b.Algorithm == core.Concurrency {
		d.lease(k, n, b)
	} else if wn := n.field("window"); wn == nil {
		d.badf(k.at, "budget %q has no window (e.g. window: 1m)", k.text)
	} else {
		b.Window, _ = d.duration(wn, "window")
	}
	if ln := n.field("lease"); ln != nil && b.Algorithm != core.Concurrency {
		d.badf(ln.at, "lease applies to concurrency only, not %s (use window)", b.Algorithm)
	}
	if bn := n.field("burst"); bn != nil {
		b.Burst, _ = d.integer(bn, "burst", 1, core.MaxQuota)
	}
	if mw := n.field("max_wait"); mw != nil {
		b.MaxWait, _ = d.duration(mw, "max_wait")
	}
	return qn != nil
}

// budgetKeys reads how budget k finds a request's key into b: key,
// key_class, missing_key and fallback_key.
func (d *decoder) budgetKeys(k, n *node, b *core.Budget) {
	keyName := ""
	if kn := n.field("key"); kn == nil {
		d.badf(k.at, "budget %q has no key (the key function's name, e.g. key: tenant)", k.text)
	} else {
		keyName, b.Key, _ = d.keyFunc(kn, "key")
	}
	b.KeyClass = keyName
	if kc := n.field("key_class"); kc != nil {
		b.KeyClass, _ = d.name(kc, "key_class")
	}
	mk := n.field("missing_key")
	if mk != nil {
		if v, ok := d.scalar(mk, "missing_key"); ok {
			if m, err := core.ParseMissingKey(v.text); err != nil {
				d.fail(v, fmt.Errorf("missing_key: %w", err))
			} else {
				b.MissingKey = m
			}
		}
	}
	if fk := n.field("fallback_key"); fk != nil {
		_, b.FallbackKey, _ = d.keyFunc(fk, "fallback_key")
	}
}

// budgetHandling reads which requests the budget skips and how it acts
// into b: ignore_methods, shadow, failure_mode and leasing.
func (d *decoder) budgetHandling(n *node, b *core.Budget) {
	if im := n.field("ignore_methods"); im != nil {
		b.IgnoreMethods = d.methods(im)
	}
	if sn := n.field("shadow"); sn != nil {
		b.Shadow, _ = d.boolean(sn, "shadow")
	}
	if fm := n.field("failure_mode"); fm != nil {
		if v, ok := d.scalar(fm, "failure_mode"); ok {
			if m, err := core.ParseFailureMode(v.text); err != nil {
				d.fail(v, fmt.Errorf("failure_mode: %w", err))
			} else {
				b.FailureMode = m
			}
		}
	}
	if ln := n.field("leasing"); ln != nil {
		d.leasing(ln, b)
	}
}

// budgetQuotaBy reads budget k's quota_by into s, checking that the
// document (tiers at tiersAt, nil when none) or the load configuration
// gives what it needs. The old name of quota_by, scaling, is read as it,
// with a warning, for one release; both in one budget is a problem.
func (d *decoder) budgetQuotaBy(k, n *node, s *budgetSpec, tiersAt *where) {
	qb, old := n.field("quota_by"), n.field("scaling")
	switch {
	case qb != nil && old != nil:
		// Reported once; quota_by is read, so that nothing else is
		// reported for lack of it.
		d.badf(old.at, "budget %q gives both quota_by and scaling, its old name; keep quota_by", k.text)
		old = nil
	case old != nil:
		qb = old
	case qb == nil:
		return
	}
	what := "quota_by"
	if old != nil {
		what = "scaling"
	}
	v, ok := d.scalar(qb, what)
	if !ok {
		return
	}
	x, err := ParseQuotaBy(v.text)
	if err != nil {
		d.fail(v, err)
		return
	}
	if old != nil {
		d.warnf(old.at, "scaling is the old name of quota_by, read until the next release; write quota_by: %s", x)
	}
	s.quotaBy = x
	switch {
	case x == ByTier && tiersAt == nil:
		d.badf(qb.at, "quota_by is tier but no tiers are defined (tiers: {small: {share: 25%%, up_to: 100}, ...})")
	case x != Flat && d.opts.Subjects == nil && !d.assigns:
		d.badf(qb.at, "quota_by is %s, which looks up each key's subject, but the document assigns no subjects (subjects: {acme: pro}) and no subject lookup was given (LoadConfig.Subjects)", x)
	}
}

// budgetSubject reads the key function that finds a by-tier or by-plan
// budget's subject into s.
func (d *decoder) budgetSubject(n *node, s *budgetSpec) {
	if sj := n.field("subject"); sj != nil {
		if _, fn, ok := d.keyFunc(sj, "subject"); ok {
			if s.quotaBy == Flat {
				d.badf(sj.at, "subject applies to quota_by tier and plan only; this budget is flat")
			}
			s.subject = fn
		}
	}
}

// methods reads a list of method names. What a method may be is core's
// rule (core.Budget.IgnoreMethods), reported at the item by
// budgetProblems.
func (d *decoder) methods(n *node) []string {
	if n.kind != kindSeq {
		d.badf(n.at, "ignore_methods must be a list of methods ([GET, HEAD, OPTIONS]), not %s", n.kind)
		return nil
	}
	var out []string
	for _, it := range n.items {
		if v, ok := d.scalar(it, "a method"); ok {
			out = append(out, v.text)
		}
	}
	return out
}

// budgetProblems reports the problems core finds in b, the budget decoded
// from n (named by k), each at the line of the setting it is about, and
// reports whether there were none. The rules are core's alone
// (core.Budget.Validate); this only places them.
func (d *decoder) budgetProblems(k *node, n *node, b core.Budget) bool {
	err := b.Validate()
	if err == nil {
		return true
	}
	for _, p := range unwrapAll(err) {
		at := k.at
		var bp *core.BudgetProblem
		if errors.As(p, &bp) {
			if f := fieldAt(n, bp.Field); f != nil {
				at = f.at
				if bp.Index >= 0 && f.kind == kindSeq && bp.Index < len(f.items) {
					at = f.items[bp.Index].at
				}
			}
			p = errors.New(bp.Msg)
		}
		d.bad(at, p)
	}
	return false
}

// fieldAt returns the node of n's setting path ("burst", "leasing.ttl"),
// or its nearest ancestor that n holds, or nil for "" or when n holds no
// part of it.
func fieldAt(n *node, path string) *node {
	var found *node
	for part := range strings.SplitSeq(path, ".") {
		if part == "" || n == nil || n.kind != kindMap {
			break
		}
		if n = n.field(part); n != nil {
			found = n
		}
	}
	return found
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// checkResolved checks that every quota a by-tier or by-plan budget can
// resolve to (each tier's quota or share of the reference, the base plus
// each plan) is one the engine can evaluate.
func (d *decoder) checkResolved(cfg *Document) {
	r := cfg.resolver
	for _, s := range cfg.budgets {
		if !s.ok {
			continue
		}
		check := func(q int64, how string) {
			if !d.checkQuota(s, q, s.at, how) {
				s.ok = false
			}
		}
		switch s.quotaBy {
		case ByTier:
			if r.Tiers == nil {
				continue
			}
			for _, name := range r.Tiers.Names() {
				t, _ := r.Tiers.Get(name)
				switch {
				case t.Quota != 0 && t.Window != s.b.Window:
					d.badf(s.at, "tier %q is %s, but budget %q counts per %v; a tier given as a quota applies to budgets of its window", name, t.describe(), s.b.Name, s.b.Window)
					s.ok = false
				case t.Quota != 0:
					check(t.Quota, fmt.Sprintf("tier %q (%s)", name, t.describe()))
				case s.quotaOfTier:
					d.badf(s.at, "tier %q is a share of the budget's quota, and budget %q gives none (quota: <int>)", name, s.b.Name)
					s.ok = false
				default:
					q := t.Scale(s.b.Quota)
					check(q, fmt.Sprintf("tier %q (%s) scales quota %d to %d", name, t.Share, s.b.Quota, q))
				}
			}
		case ByPlan:
			if r.Plans == nil {
				continue
			}
			for name, incs := range r.Plans.m {
				if inc, ok := incs[s.b.Name]; ok {
					q := min(s.b.Quota+inc, core.MaxQuota)
					check(q, fmt.Sprintf("plan %q raises quota %d to %d", name, s.b.Quota, q))
				}
			}
		}
	}
}

// checkQuota reports, at at, whether the engine cannot evaluate budget s
// at quota q, which how describes; it returns whether it can.
func (d *decoder) checkQuota(s *budgetSpec, q int64, at where, how string) bool {
	b := s.b
	b.Quota, b.QuotaFunc = q, nil
	if err := validateBudget(b); err != nil {
		d.badf(at, "%s: %v", how, err)
		return false
	}
	return true
}

// quotaOfTier gives budget s, which has no quota field, the quota of the
// fallback tier when that tier is a quota ("free: 100/min"): the quota the
// engine applies when a subject's tier cannot be resolved.
func (d *decoder) quotaOfTier(s *budgetSpec, k *node) {
	if s.quotaBy == ByTier && d.resolver.Tiers != nil {
		if t, ok := d.resolver.Tiers.Fallback(); ok && t.Quota != 0 {
			s.b.Quota, s.quotaOfTier = t.Quota, true
			return
		}
	}
	if s.quotaBy == ByTier {
		d.badf(k.at, "budget %q has no quota; give one, or set tier_fallback to a tier given as a quota (free: 100/min), which the budget then falls back to", k.text)
		return
	}
	d.badf(k.at, "budget %q has no quota", k.text)
}

// lease reads a concurrency budget's lease (its Window in core): how long
// a slot held in a shared store counts when its request never gives it
// back. A concurrency budget has no window.
func (d *decoder) lease(k, n *node, b *core.Budget) {
	if wn := n.field("window"); wn != nil {
		d.badf(wn.at, "budget %q is a concurrency budget and has no window; set lease (how long a slot is held at most, e.g. lease: 10m)", k.text)
	}
	if ln := n.field("lease"); ln == nil {
		d.badf(k.at, "budget %q is a concurrency budget and needs a lease (how long a slot is held at most, e.g. lease: 10m)", k.text)
	} else {
		b.Window, _ = d.duration(ln, "lease")
	}
}

// capacity is the largest cost a request can have in s for any key: the
// smallest capacity over the quotas s resolves to without an override.
func (s *budgetSpec) capacity(r *Resolver) int64 {
	lowest := s.b.Quota
	if s.quotaBy == ByTier && r.Tiers != nil {
		for _, name := range r.Tiers.Names() {
			t, _ := r.Tiers.Get(name)
			lowest = min(lowest, t.Scale(s.b.Quota))
		}
	}
	switch s.b.Algorithm {
	case core.TokenBucket:
		if s.b.Burst > 0 {
			return s.b.Burst
		}
	case core.LeakyBucket:
		if s.b.Burst > 0 {
			return s.b.Burst
		}
		return 1
	}
	return lowest
}

// validateBudget runs the engine's own validation of b.
func validateBudget(b core.Budget) error {
	err := b.Validate()
	if err == nil {
		return nil
	}
	var msgs []string
	for _, p := range unwrapAll(err) {
		msgs = append(msgs, strings.TrimPrefix(p.Error(), fmt.Sprintf("budget %q: ", b.Name)))
	}
	return errors.New(strings.Join(msgs, "; "))
}

func unwrapAll(err error) []error {
	var ce *core.ConfigError
	if errors.As(err, &ce) {
		return ce.Problems
	}
	return []error{err}
}
