package policy

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func BenchmarkQuotaFuncTier(b *testing.B) {
	apps := newSubjectTable(map[string]Subject{"acme": {Cap: 80}})
	r := &Resolver{Tiers: seedTiers(b, ""), Subjects: MustSubjects(apps.lookup, CacheConfig{})}
	qf := r.QuotaFunc("t_mutate", ByTier, 300, nil)
	rq := &core.Request{Method: "POST", Context: context.Background()}
	b.ReportAllocs()
	for b.Loop() {
		if q, err := qf(rq, "acme"); err != nil || q != 75 {
			b.Fatal(q, err)
		}
	}
}

// BenchmarkQuotaFuncAssigned resolves a subject the policy file assigns
// to a tier given as a quota: a map read, no cache.
func BenchmarkQuotaFuncAssigned(b *testing.B) {
	tiers, err := NewTiers([]Tier{{Name: "pro", Quota: 1000, Window: time.Minute, PinnedOnly: true}}, "")
	if err != nil {
		b.Fatal(err)
	}
	r := &Resolver{Tiers: tiers, Assigned: map[string]Subject{"acme": {Tier: "pro"}}}
	qf := r.QuotaFunc("api", ByTier, 100, nil)
	rq := &core.Request{Method: "POST", Context: context.Background()}
	b.ReportAllocs()
	for b.Loop() {
		if q, err := qf(rq, "acme"); err != nil || q != 1000 {
			b.Fatal(q, err)
		}
	}
}

func BenchmarkQuotaFuncPlan(b *testing.B) {
	plans, _ := NewPlans(map[string]map[string]int64{"pro": {"email_send": 500}})
	apps := newSubjectTable(map[string]Subject{"acme": {Plan: "pro"}})
	r := &Resolver{Plans: plans, Subjects: MustSubjects(apps.lookup, CacheConfig{})}
	qf := r.QuotaFunc("email_send", ByPlan, 1000, nil)
	rq := &core.Request{Method: "POST", Context: context.Background()}
	b.ReportAllocs()
	for b.Loop() {
		if q, err := qf(rq, "acme"); err != nil || q != 1500 {
			b.Fatal(q, err)
		}
	}
}

// BenchmarkDecide compares a whole decision on the memory store for a flat
// budget and for the same budget by-tier.
func BenchmarkDecide(b *testing.B) {
	apps := newSubjectTable(map[string]Subject{"acme": {Cap: 80}})
	r := &Resolver{Tiers: seedTiers(b, ""), Subjects: MustSubjects(apps.lookup, CacheConfig{})}
	tenant := func(*core.Request) (string, error) { return "acme", nil }
	for _, tc := range []struct {
		name string
		qf   core.QuotaFunc
	}{{"flat", nil}, {"tier", r.QuotaFunc("t", ByTier, 1<<40, nil)}} {
		b.Run(tc.name, func(b *testing.B) {
			store := memstore.MustNew(memstore.Config{SweepInterval: -1})
			defer store.Close()
			eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{
				Name: "t", Algorithm: core.SlidingWindow, Quota: 1 << 40, Window: time.Second, Key: tenant, QuotaFunc: tc.qf,
			}}})
			l := eng.MustLayer(core.Use("t"))
			rq := &core.Request{Method: "POST", Context: context.Background()}
			var d core.Decision
			b.ReportAllocs()
			for b.Loop() {
				d.Reset()
				l.Decide(rq, &d)
				if !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

func BenchmarkParseSeed004(b *testing.B) {
	data, err := os.ReadFile("testdata/seed004.yaml")
	if err != nil {
		b.Fatal(err)
	}
	opts := testOptions(b, nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("seed004.yaml", data, opts); err != nil {
			b.Fatal(err)
		}
	}
}
