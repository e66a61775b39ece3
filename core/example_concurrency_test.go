package core_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// At most 2 exports in flight per tenant, decided outside a router: each
// allowed decision holds a slot until Release gives it back. (The router
// adapters release when the handler returns.)
func ExampleConcurrency() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	tenant := func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	eng := core.MustNew(core.Config{
		Store: store,
		Budgets: []core.Budget{
			// Window is the lease: in Redis, a slot its instance never gave
			// back is reclaimed after 10 minutes.
			{Name: "exports", Algorithm: core.Concurrency, Quota: 2, Window: 10 * time.Minute, Key: tenant},
		},
	})
	exports := eng.MustLayer(core.Use("exports"))
	export := func() *core.Decision {
		r := &core.Request{Method: "POST", Path: "/exports", Header: http.Header{"X-Tenant": {"acme"}}}
		d := new(core.Decision)
		exports.Decide(r, d)
		fmt.Printf("allowed=%v free=%d retry-after=%v\n", d.Allowed, d.Results[0].Remaining, d.RetryAfter)
		return d
	}
	first, second := export(), export()
	export() // both slots are held
	first.Done(context.Background(), 0)
	export().Done(context.Background(), 0)
	second.Done(context.Background(), 0)
	p, _ := eng.Peek(context.Background(), "acme", "exports")
	fmt.Println("free at the end:", p[0].Remaining)
	// Output:
	// allowed=true free=1 retry-after=0s
	// allowed=true free=0 retry-after=0s
	// allowed=false free=0 retry-after=1s
	// allowed=true free=0 retry-after=0s
	// free at the end: 2
}
