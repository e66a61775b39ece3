package tenantapi_test

import (
	"fmt"
	"strings"

	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/examples/tenantapi"
)

// New builds the API's engine on a store; each route carries the layer of
// budgets it spends, for the router's quotagate middleware.
func ExampleNew() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	api, err := tenantapi.New(tenantapi.Config{Store: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range api.Routes()[:5] {
		fmt.Printf("%-4s %-26s %s\n", r.Method, r.Path, strings.Join(r.Layer.Budgets(), " + "))
	}
	// Output:
	// GET  /api/reports/{name}        t_mutate + t_heavy
	// POST /api/exports               t_mutate + t_heavy
	// GET  /api/dashboard/values      t_mutate + t_values
	// POST /api/checks                t_mutate + t_check
	// POST /api/outbound              t_mutate + t_outbound
}

// An invalid environment value stops New, naming the variable.
func ExampleNew_invalidEnvironment() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	env := map[string]string{"PUBLIC_RATE_LIMIT": "0"}
	_, err := tenantapi.New(tenantapi.Config{Store: store, Env: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	fmt.Println(err)
	// Output:
	// invalid configuration:
	//	environment variable PUBLIC_RATE_LIMIT="0": quota 0 is below 1
}

// Authenticate maps a bearer token to its identity for a route's access.
func ExampleAuthenticate() {
	id, ok := tenantapi.Authenticate(tenantapi.OperatorOnly, []string{"Bearer op-acme-alice"})
	fmt.Println(id.Tenant, id.Operator, ok)
	_, ok = tenantapi.Authenticate(tenantapi.OperatorOnly, []string{"Bearer sub-acme-1001"})
	fmt.Println(ok)
	// Output:
	// acme alice true
	// false
}
