package core_test

import (
	"fmt"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// A tenant write budget that ignores reads and a heavy-operation budget,
// spent together by one request: all or nothing.
func Example() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	tenant := func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	eng, err := core.New(core.Config{
		Store: store,
		Budgets: []core.Budget{
			{Name: "t_mutate", Quota: 300, Window: time.Minute, Key: tenant, IgnoreMethods: []string{"GET", "HEAD", "OPTIONS"}},
			{Name: "t_heavy", Quota: 2, Window: time.Minute, Key: tenant},
		},
	})
	if err != nil {
		panic(err)
	}
	exports := eng.MustLayer(core.Use("t_mutate", "t_heavy"))

	r := &core.Request{Method: "POST", Path: "/api/exports", Header: headers{"X-Tenant": "acme"}}
	for i := 0; i < 3; i++ {
		var d core.Decision
		exports.Decide(r, &d)
		fmt.Println(d.Allowed, d.Results[0].Remaining, d.Results[1].Remaining)
	}
	// Output:
	// true 299 1
	// true 298 0
	// false 298 0
}

// Configuration is validated once and every problem is reported.
func ExampleNew_configurationErrors() {
	_, err := core.New(core.Config{
		Store: memstore.MustNew(memstore.Config{SweepInterval: -1}),
		Budgets: []core.Budget{
			{Name: "a", Quota: 0, Window: time.Minute},
			{Name: "b", Quota: 10, Window: 0, Key: func(*core.Request) (string, error) { return "k", nil }},
		},
	})
	fmt.Println(err)
	// Output:
	// quotagate: invalid configuration
	// 	budget "a": quota 0 is not positive
	// 	budget "a": no key function
	// 	budget "b": window 0s is not positive
}

type headers map[string]string

func (h headers) Get(name string) string      { return h[name] }
func (h headers) Values(name string) []string { return []string{h[name]} }

// Budgets built from settings are checked before any engine exists: every
// problem at once, each naming its budget, and a layer's options against
// them. ParseFailureMode and ParseMissingKey read the same names a policy
// file uses.
func ExampleValidateBudgets() {
	mode, err := core.ParseFailureMode("closed") // e.g. from an environment variable
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = core.ParseMissingKey("allow")
	fmt.Println(err)
	key := func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	budgets := []core.Budget{
		{Name: "login", Quota: 5, Window: 15 * time.Minute, Key: key, FailureMode: mode},
		{Name: "burst", Algorithm: core.TokenBucket, Quota: 2000, Window: time.Millisecond, Key: key},
	}
	fmt.Println(core.ValidateBudgets(budgets))
	fmt.Println(core.ValidateLayer(budgets[:1], core.Use("login"), core.Cost(6)))
	// Output:
	// unknown missing-key action "allow" (want deny, skip or fallback)
	// quotagate: invalid configuration
	// 	budget "burst": quota 2000 per 1ms is more than one unit per microsecond
	// quotagate: invalid configuration
	// 	budget "login": cost 6 exceeds what the budget can ever hold (5)
}

// An observer switches on the kind the engine gives each error; store
// kinds come without a budget.
func ExampleErrorKind() {
	obs := &storeAlarm{}
	var o core.Observer = obs
	o.ObserveError(core.KindStoreTimeout, "", &core.StoreError{Op: "take", Err: fmt.Errorf("redis store: take: %w", errTimeout)})
	o.ObserveError(core.KindMissingKey, "per_tenant", fmt.Errorf("no tenant: %w", core.ErrNoKey))
	fmt.Println(obs.timeouts, obs.last)
	// Output: 1 quotagate: redis store: take: i/o timeout
}

var errTimeout = fmt.Errorf("i/o timeout")

// storeAlarm counts store timeouts and keeps the last store error.
type storeAlarm struct {
	timeouts int
	last     string
}

func (a *storeAlarm) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {}

func (a *storeAlarm) ObserveError(kind core.ErrorKind, budget string, err error) {
	if !kind.IsStore() {
		return // a budget's own problem: logged elsewhere
	}
	if kind == core.KindStoreTimeout {
		a.timeouts++
	}
	a.last = err.Error()
}
