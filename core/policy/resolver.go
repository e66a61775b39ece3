package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quotagate/quotagate/core"
)

// QuotaBy says what a budget's quota is resolved by per key: nothing
// (Flat), the key's tier (ByTier) or its plan (ByPlan). It is a budget's
// quota_by in a configuration document.
type QuotaBy int

const (
	// Flat budgets have one quota for every key; tiers, plans and
	// overrides do not apply. Seed use: security budgets per (tenant,
	// operator), per-IP public budgets.
	Flat QuotaBy = iota
	// ByTier budgets get the quota of the key's tier: the tier's own quota
	// when the tier is one ("pro: 1000/min"), else their reference quota ×
	// the tier's share, rounded up and never below 1; an override in the
	// subject for the budget replaces it.
	ByTier
	// ByPlan budgets get their base quota + the increase of the key's
	// plan, unless the subject has an override for the budget, which
	// replaces both.
	ByPlan
)

// Deprecated names, kept for one release.
const (
	// Deprecated: use [ByTier].
	TierScaled = ByTier
	// Deprecated: use [ByPlan].
	PlanScaled = ByPlan
)

// Scaling is the old name of QuotaBy.
//
// Deprecated: use [QuotaBy].
type Scaling = QuotaBy

var quotaByNames = [...]string{"flat", "tier", "plan"}

// String returns the value's configuration name: "flat", "tier" or "plan".
func (q QuotaBy) String() string {
	if q >= 0 && int(q) < len(quotaByNames) {
		return quotaByNames[q]
	}
	return fmt.Sprintf("QuotaBy(%d)", int(q))
}

// ParseQuotaBy returns the QuotaBy named s: "flat", "tier" (or
// "tier_scaled") or "plan".
func ParseQuotaBy(s string) (QuotaBy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "flat":
		return Flat, nil
	case "tier", "tier_scaled", "tiered":
		return ByTier, nil
	case "plan", "plans":
		return ByPlan, nil
	}
	return 0, fmt.Errorf("unknown quota_by %q (want flat, tier or plan)", s)
}

// ParseScaling is the old name of ParseQuotaBy.
//
// Deprecated: use [ParseQuotaBy].
func ParseScaling(s string) (QuotaBy, error) { return ParseQuotaBy(s) }

// ErrUnknownPlan is wrapped by errors about a plan name the table lacks.
var ErrUnknownPlan = errors.New("unknown plan")

// Plans maps a plan name to the increase it adds to each by-plan
// budget's base quota. A budget a plan does not mention gets no increase.
type Plans struct {
	m map[string]map[string]int64
}

// NewPlans validates plans (plan → budget → increase, increases not
// negative) and returns the table.
func NewPlans(plans map[string]map[string]int64) (*Plans, error) {
	p := &Plans{m: make(map[string]map[string]int64, len(plans))}
	var problems []string
	for name, incs := range plans {
		if name == "" {
			problems = append(problems, "a plan has no name")
		}
		cp := make(map[string]int64, len(incs))
		for b, n := range incs {
			if n < 0 || n > core.MaxQuota {
				problems = append(problems, fmt.Sprintf("plan %q: increase %d for budget %q is out of range", name, n, b))
			}
			cp[b] = n
		}
		p.m[name] = cp
	}
	if len(problems) > 0 {
		return nil, errors.New("plans: " + strings.Join(problems, "; "))
	}
	return p, nil
}

// Increase returns what plan adds to budget: 0 for no plan ("") or a
// budget the plan does not mention, an error wrapping ErrUnknownPlan for a
// plan the table lacks.
func (p *Plans) Increase(plan, budget string) (int64, error) {
	if plan == "" {
		return 0, nil
	}
	if p == nil {
		return 0, fmt.Errorf("plan %q: %w", plan, ErrUnknownPlan)
	}
	incs, ok := p.m[plan]
	if !ok {
		return 0, fmt.Errorf("plan %q: %w", plan, ErrUnknownPlan)
	}
	return incs[budget], nil
}

// Has reports whether the table defines plan.
func (p *Plans) Has(plan string) bool {
	if p == nil {
		return false
	}
	_, ok := p.m[plan]
	return ok
}

// Resolver resolves the quota of by-tier and by-plan budgets per key, from the
// operator's tables (tiers, plans) and the application's subjects.
// A Resolver is immutable once in use; a reloaded configuration builds a new
// one around the same Subjects cache.
type Resolver struct {
	// Tiers is the tier table of ByTier budgets.
	Tiers *Tiers
	// Plans is the plan table of ByPlan budgets.
	Plans *Plans
	// Assigned holds the subjects a configuration assigns by key (its
	// subjects section). A key found here is not looked up in Subjects.
	Assigned map[string]Subject
	// Subjects finds the subject of a key that is not in Assigned. When it
	// is nil and Assigned is not, a key found in neither has no plan and no
	// override, and is in the fallback tier (Tiers.Fallback) when there is
	// one, else in the tier derived for a cap of 0.
	Subjects *Subjects
}

// Quota resolves the quota of budget, whose quota is by tier, by plan or
// flat as by says, with reference as its reference or base quota, for the
// subject identified by subjectKey:
//
//   - Flat: reference.
//   - An override in the subject for budget: that override.
//   - ByTier: reference × the share of the subject's tier (pinned, or
//     derived from its cap), rounded up, at least 1.
//   - ByPlan: reference + the increase of the subject's plan.
//
// When the subject cannot be found or its tier is unknown, a ByTier
// budget uses the fallback tier if the table has one; otherwise Quota
// returns the error, and the engine then applies the budget's static Quota
// (the reference for ByTier, the base for ByPlan: no plan increase)
// and reports the error to its observer. An unknown plan is such an error.
func (r *Resolver) Quota(ctx context.Context, budget string, by QuotaBy, reference int64, subjectKey string) (int64, error) {
	if by == Flat {
		return reference, nil
	}
	sub, err := r.subject(ctx, subjectKey)
	if err != nil {
		return r.fallback(by, reference, err)
	}
	if q, ok := sub.Overrides[budget]; ok {
		if q < 1 || q > core.MaxQuota {
			return 0, fmt.Errorf("override %d for budget %q is out of range", q, budget)
		}
		return q, nil
	}
	switch by {
	case ByTier:
		if r.Tiers == nil {
			return 0, errors.New("policy: resolver has no tiers")
		}
		t, err := r.Tiers.Of(sub)
		if err != nil {
			return r.fallback(by, reference, err)
		}
		return t.Scale(reference), nil
	case ByPlan:
		inc, err := r.Plans.Increase(sub.Plan, budget)
		if err != nil {
			return 0, err
		}
		return min(reference+inc, core.MaxQuota), nil
	}
	return 0, fmt.Errorf("policy: unknown quota_by %d", int(by))
}

// subject returns the subject of key: assigned, or looked up.
func (r *Resolver) subject(ctx context.Context, key string) (Subject, error) {
	if sub, ok := r.Assigned[key]; ok {
		return sub, nil
	}
	switch {
	case r.Subjects != nil:
		return r.Subjects.Get(ctx, key)
	case r.Assigned != nil:
		if t, ok := r.Tiers.fallbackTier(); ok {
			return Subject{Tier: t.Name}, nil
		}
		return Subject{}, nil
	}
	return Subject{}, errors.New("policy: resolver has no subjects")
}

func (r *Resolver) fallback(by QuotaBy, reference int64, err error) (int64, error) {
	if by == ByTier && r.Tiers != nil {
		if t, ok := r.Tiers.Fallback(); ok {
			return t.Scale(reference), nil
		}
	}
	return 0, err
}

// QuotaFunc returns the core.QuotaFunc of budget: Quota for every request,
// with the subject key taken from subject (for example the tenant of a
// budget keyed by tenant and operator) or, when subject is nil, the
// budget's own key. Use it as core.Budget.QuotaFunc, with the reference
// (or base) as core.Budget.Quota, which the engine falls back to on error.
// Flat budgets need no QuotaFunc; QuotaFunc returns nil for them.
func (r *Resolver) QuotaFunc(budget string, by QuotaBy, reference int64, subject core.KeyFunc) core.QuotaFunc {
	if by == Flat {
		return nil
	}
	return func(req *core.Request, key string) (int64, error) {
		ctx := req.Context
		if ctx == nil {
			ctx = context.Background()
		}
		if subject != nil {
			k, err := subject(req)
			if err != nil {
				return r.fallback(by, reference, fmt.Errorf("subject key: %w", err))
			}
			key = k
		}
		return r.Quota(ctx, budget, by, reference, key)
	}
}
