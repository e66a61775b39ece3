package policy

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// storeFactory returns a store driven by clock.
type storeFactory struct {
	name string
	new  func(t *testing.T, clock core.Clock) core.Store
}

// stores are the stores these tests drive with a fake clock: the memory
// store. The Redis store takes its time from the server, and nothing on the
// wire carries another; that it evaluates changed limits exactly as the
// memory store does is pinned by package redisstore's differential tests,
// which change limits mid-stream under a fake clock of their own.
func stores() []storeFactory {
	return []storeFactory{
		{"memory", func(t *testing.T, clock core.Clock) core.Store {
			s := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
}

// A changed quota takes effect at the next request, against the count
// already spent in the window: raising it admits more at once, lowering it
// denies at once. Stores never embed the quota in the key or the state.
func TestQuotaChangeMidWindow(t *testing.T) {
	for _, sf := range stores() {
		for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.SlidingLog} {
			t.Run(sf.name+"/"+alg.String(), func(t *testing.T) {
				clock := newFakeClock()
				store := sf.new(t, clock)
				plans, _ := NewPlans(map[string]map[string]int64{"pro": {"email_send": 5}})
				apps := newSubjectTable(map[string]Subject{"acme": {}})
				subs := MustSubjects(apps.lookup, CacheConfig{TTL: time.Hour, Clock: clock})
				r := &Resolver{Plans: plans, Subjects: subs}
				keys := testKeys()
				eng := core.MustNew(core.Config{Store: store, Clock: clock, Budgets: []core.Budget{{
					Name: "email_send", Algorithm: alg, Quota: 5, Window: time.Minute, Key: keys["org"],
					QuotaFunc: r.QuotaFunc("email_send", ByPlan, 5, nil),
				}}})
				l := eng.MustLayer(core.Use("email_send"))
				acme := func() *core.Request { return req("POST", "X-Org", "acme") }

				if got := admitted(l, 8, acme); got != 5 {
					t.Fatalf("base quota: admitted %d of 8, want 5", got)
				}
				// The organisation moves to pro (+5): invalidated, the next
				// request already sees 10, and 5 more pass in this window.
				clock.Advance(time.Second)
				apps.set("acme", Subject{Plan: "pro"})
				subs.Invalidate("acme")
				d := take(l, acme())
				if !d.Allowed || d.Results[0].Limit.Quota != 10 || d.Results[0].Remaining != 4 {
					t.Fatalf("after the upgrade: allowed=%v %+v; want allowed, quota 10, remaining 4", d.Allowed, d.Results)
				}
				if got := admitted(l, 8, acme); got != 4 {
					t.Fatalf("after the upgrade: admitted %d more, want 4", got)
				}
				// An override of 3 replaces base and plan: the 10 already
				// spent exceed it, so the next request is denied at once.
				clock.Advance(time.Second)
				apps.set("acme", Subject{Plan: "pro", Overrides: map[string]int64{"email_send": 3}})
				subs.Invalidate("acme")
				d = take(l, acme())
				if d.Allowed || d.Results[0].Limit.Quota != 3 || d.Results[0].Remaining != 0 {
					t.Fatalf("after the override: allowed=%v %+v; want denied with quota 3, remaining 0", d.Allowed, d.Results)
				}
				// A new window starts from zero under the override.
				clock.Advance(2 * time.Minute)
				if got := admitted(l, 8, acme); got != 3 {
					t.Fatalf("next window under the override: admitted %d, want 3", got)
				}
			})
		}
	}
}

// Without Invalidate, a change is picked up when the cache TTL expires,
// within the same window.
func TestQuotaChangeAfterTTL(t *testing.T) {
	clock := newFakeClock()
	store := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
	defer store.Close()
	apps := newSubjectTable(map[string]Subject{"acme": {Cap: 80}}) // small: 25%
	subs := MustSubjects(apps.lookup, CacheConfig{TTL: 5 * time.Second, Clock: clock})
	r := &Resolver{Tiers: seedTiers(t, ""), Subjects: subs}
	keys := testKeys()
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{
		Name: "t_mutate", Quota: 300, Window: time.Minute, Key: keys["tenant"],
		QuotaFunc: r.QuotaFunc("t_mutate", ByTier, 300, nil),
	}}})
	l := eng.MustLayer(core.Use("t_mutate"))
	acme := func() *core.Request { return req("POST", "X-Tenant", "acme") }
	if got := admitted(l, 100, acme); got != 75 {
		t.Fatalf("small tier admitted %d, want 75", got)
	}
	apps.set("acme", Subject{Cap: 500}) // licence raised: medium, 50%
	if got := admitted(l, 10, acme); got != 0 {
		t.Fatalf("within the TTL the old tier applies; admitted %d", got)
	}
	clock.Advance(5 * time.Second)
	if got := admitted(l, 100, acme); got != 75 {
		t.Fatalf("after the TTL: admitted %d more, want 75 (150 − 75)", got)
	}
}

// The engine applies the reference quota when resolution fails and tells
// the observer.
type errObserver struct{ errs []error }

func (o *errObserver) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {}
func (o *errObserver) ObserveError(_ core.ErrorKind, _ string, err error) {
	o.errs = append(o.errs, err)
}

func TestEngineFallsBackToReference(t *testing.T) {
	subs := MustSubjects(func(context.Context, string) (Subject, error) {
		return Subject{Plan: "platinum"}, nil // a plan the table lacks
	}, CacheConfig{})
	plans, _ := NewPlans(map[string]map[string]int64{"pro": {"email_send": 5}})
	r := &Resolver{Plans: plans, Subjects: subs}
	obs := &errObserver{}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Observer: obs, Budgets: []core.Budget{{
		Name: "email_send", Quota: 4, Window: time.Minute, Key: testKeys()["org"],
		QuotaFunc: r.QuotaFunc("email_send", ByPlan, 4, nil),
	}}})
	l := eng.MustLayer(core.Use("email_send"))
	if got := admitted(l, 10, func() *core.Request { return req("POST", "X-Org", "acme") }); got != 4 {
		t.Fatalf("admitted %d, want the base 4", got)
	}
	if len(obs.errs) != 10 {
		t.Fatalf("observer saw %d errors, want 10", len(obs.errs))
	}
}

// A token bucket (GCRA) stores time (when the bucket is full again), not a
// count. With the default burst (the quota), the bucket's capacity is one
// window whatever the quota, so a quota change keeps the fraction of the
// bucket that is spent: an empty bucket stays empty but refills at the new
// rate from the next request (a shorter wait after a raise, a longer one
// after a cut).
func TestQuotaChangeTokenBucket(t *testing.T) {
	for _, sf := range stores() {
		t.Run(sf.name, func(t *testing.T) {
			clock := newFakeClock()
			store := sf.new(t, clock)
			apps := newSubjectTable(map[string]Subject{"acme": {}})
			subs := MustSubjects(apps.lookup, CacheConfig{TTL: time.Hour, Clock: clock})
			plans, _ := NewPlans(map[string]map[string]int64{"pro": {"b": 54}})
			r := &Resolver{Plans: plans, Subjects: subs}
			eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{
				Name: "b", Algorithm: core.TokenBucket, Quota: 6, Window: time.Minute,
				Key: testKeys()["org"], QuotaFunc: r.QuotaFunc("b", ByPlan, 6, nil),
			}}})
			l := eng.MustLayer(core.Use("b"))
			acme := func() *core.Request { return req("POST", "X-Org", "acme") }
			if got := admitted(l, 10, acme); got != 6 {
				t.Fatalf("admitted %d, want the burst of 6", got)
			}
			if d := take(l, acme()); d.Allowed || d.RetryAfter != 10*time.Second {
				t.Fatalf("at 6/min: allowed=%v retry after %v, want denied for 10s", d.Allowed, d.RetryAfter)
			}
			apps.set("acme", Subject{Plan: "pro"}) // 60/min, one every second
			subs.Invalidate("acme")
			if d := take(l, acme()); d.Allowed || d.RetryAfter != time.Second {
				t.Fatalf("at 60/min: allowed=%v retry after %v, want denied for 1s", d.Allowed, d.RetryAfter)
			}
			clock.Advance(time.Second)
			if d := take(l, acme()); !d.Allowed {
				t.Fatalf("at 60/min, one second later: denied (retry after %v)", d.RetryAfter)
			}
			apps.set("acme", Subject{Plan: "pro", Overrides: map[string]int64{"b": 1}}) // 1/min
			subs.Invalidate("acme")
			clock.Advance(time.Second)
			if d := take(l, acme()); d.Allowed || d.RetryAfter < 30*time.Second {
				t.Fatalf("at 1/min: allowed=%v retry after %v, want a long wait", d.Allowed, d.RetryAfter)
			}
		})
	}
}
