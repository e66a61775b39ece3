package core_test

import (
	"fmt"
	"time"

	"github.com/quotagate/quotagate/core"
)

// A tenant write budget that ignores reads and a heavy-operation budget,
// spent together by one request: all or nothing.
func Example() {
	store := core.MustMemoryStore(core.MemoryConfig{})
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
		Store: core.MustMemoryStore(core.MemoryConfig{SweepInterval: -1}),
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
