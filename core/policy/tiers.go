package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Tier is a licence tier: the share of every by-tier budget's reference
// quota that a subject in this tier gets (or the tier's own quota), and
// how the tier is derived from a subject's licensed capacity.
type Tier struct {
	// Name identifies the tier, e.g. "small".
	Name string
	// Share is the fraction of the reference quota the tier gets. A tier
	// has a Share or a Quota, not both.
	Share Share
	// Quota, when not zero, is the tier's quota itself, the same for every
	// by-tier budget whatever its reference: "free: 100/min" in a
	// configuration. Window is the window Quota counts in; a by-tier
	// budget with a Quota tier must count in the same window (Parse checks
	// it).
	Quota  int64
	Window time.Duration
	// UpTo is the largest licensed capacity (Subject.Cap) this tier is
	// derived for: a subject gets the tier with the smallest UpTo at least
	// its cap. Zero means the tier has no upper bound: it is the top tier,
	// derived for caps above every bounded tier and for uncapped licences.
	// At most one tier may be the top tier.
	UpTo int64
	// PinnedOnly tiers are never derived from a cap; a subject is in them
	// only when the operator pinned the tier (Subject.Tier).
	PinnedOnly bool
}

// Scale returns the quota of a by-tier budget whose reference quota is
// reference for a subject in this tier: the tier's Quota when it has one,
// otherwise reference × Share, rounded up, at least 1.
func (t Tier) Scale(reference int64) int64 {
	if t.Quota != 0 {
		return t.Quota
	}
	return t.Share.Scale(reference)
}

// describe returns the tier's share ("25%") or quota ("100 per 1m0s").
func (t Tier) describe() string {
	if t.Quota != 0 {
		return fmt.Sprintf("%d per %v", t.Quota, t.Window)
	}
	return t.Share.String()
}

// Tiers is a validated table of tiers.
type Tiers struct {
	byName   map[string]Tier
	bounded  []Tier // derivable tiers with UpTo > 0, by UpTo ascending
	top      *Tier
	fallback *Tier
	order    []string
}

// ErrUnknownTier is wrapped by errors about a tier name the table lacks.
var ErrUnknownTier = errors.New("unknown tier")

// NewTiers validates tiers and returns the table. fallback, when not
// empty, names the tier used when a subject's tier cannot be resolved (its
// lookup fails and nothing is cached, or it pins an unknown tier); without
// one, resolution fails and the engine applies the budget's reference
// quota (and reports the error).
func NewTiers(tiers []Tier, fallback string) (*Tiers, error) {
	t := &Tiers{byName: make(map[string]Tier, len(tiers))}
	var problems []string
	for _, x := range tiers {
		switch {
		case x.Name == "":
			problems = append(problems, "a tier has no name")
			continue
		case x.Share.IsZero() && x.Quota == 0:
			problems = append(problems, fmt.Sprintf("tier %q has no share and no quota", x.Name))
		case !x.Share.IsZero() && x.Quota != 0:
			problems = append(problems, fmt.Sprintf("tier %q has both a share and a quota", x.Name))
		case x.Quota < 0 || x.Quota > core.MaxQuota:
			problems = append(problems, fmt.Sprintf("tier %q: quota %d is out of range", x.Name, x.Quota))
		case x.Quota != 0 && x.Window <= 0:
			problems = append(problems, fmt.Sprintf("tier %q: quota %d has no window", x.Name, x.Quota))
		case x.UpTo < 0:
			problems = append(problems, fmt.Sprintf("tier %q: up_to %d is negative", x.Name, x.UpTo))
		case x.PinnedOnly && x.UpTo != 0:
			problems = append(problems, fmt.Sprintf("tier %q is pinned-only but has up_to %d", x.Name, x.UpTo))
		}
		if _, dup := t.byName[x.Name]; dup {
			problems = append(problems, fmt.Sprintf("tier %q is defined more than once", x.Name))
			continue
		}
		t.byName[x.Name] = x
		t.order = append(t.order, x.Name)
		switch {
		case x.PinnedOnly:
		case x.UpTo == 0:
			if t.top != nil {
				problems = append(problems, fmt.Sprintf("tiers %q and %q both have no up_to; only the top tier may", t.top.Name, x.Name))
				continue
			}
			top := x
			t.top = &top
		default:
			t.bounded = append(t.bounded, x)
		}
	}
	slices.SortStableFunc(t.bounded, func(a, b Tier) int { return cmp.Compare(a.UpTo, b.UpTo) })
	for i := 1; i < len(t.bounded); i++ {
		if t.bounded[i].UpTo == t.bounded[i-1].UpTo {
			problems = append(problems, fmt.Sprintf("tiers %q and %q have the same up_to %d", t.bounded[i-1].Name, t.bounded[i].Name, t.bounded[i].UpTo))
		}
	}
	if fallback != "" {
		f, ok := t.byName[fallback]
		if !ok {
			problems = append(problems, fmt.Sprintf("fallback tier %q is not defined", fallback))
		} else {
			t.fallback = &f
		}
	}
	if len(problems) > 0 {
		return nil, errors.New("tiers: " + strings.Join(problems, "; "))
	}
	return t, nil
}

// Get returns the named tier.
func (t *Tiers) Get(name string) (Tier, bool) {
	x, ok := t.byName[name]
	return x, ok
}

// Names returns the tier names in the order they were given.
func (t *Tiers) Names() []string { return slices.Clone(t.order) }

// fallbackTier is Fallback on a table that may be nil.
func (t *Tiers) fallbackTier() (Tier, bool) {
	if t == nil {
		return Tier{}, false
	}
	return t.Fallback()
}

// Fallback returns the fallback tier, if one is set.
func (t *Tiers) Fallback() (Tier, bool) {
	if t.fallback == nil {
		return Tier{}, false
	}
	return *t.fallback, true
}

// Of returns the tier of subject s: the tier the operator pinned (s.Tier)
// when there is one, otherwise the tier derived from s.Cap (the bounded
// tier with the smallest UpTo at least the cap; the top tier for a larger
// cap or an uncapped licence, Cap < 0).
func (t *Tiers) Of(s Subject) (Tier, error) {
	if s.Tier != "" {
		x, ok := t.byName[s.Tier]
		if !ok {
			return Tier{}, fmt.Errorf("pinned tier %q: %w", s.Tier, ErrUnknownTier)
		}
		return x, nil
	}
	if s.Cap >= 0 {
		for _, x := range t.bounded {
			if s.Cap <= x.UpTo {
				return x, nil
			}
		}
	}
	if t.top == nil {
		if s.Cap < 0 {
			return Tier{}, fmt.Errorf("no tier for an uncapped licence: %w", ErrUnknownTier)
		}
		return Tier{}, fmt.Errorf("no tier for a cap of %d: %w", s.Cap, ErrUnknownTier)
	}
	return *t.top, nil
}
