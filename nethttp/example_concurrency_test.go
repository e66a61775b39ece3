package nethttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

type tenantKey struct{}

// At most 4 concurrent exports per tenant: a concurrency budget counts
// requests in flight, and its slot is given back when the handler returns.
// The fifth concurrent export of a tenant is denied with 429 and
// Retry-After: 1.
func ExampleMiddleware_concurrency() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng := core.MustNew(core.Config{
		Store: store,
		Budgets: []core.Budget{{
			Name: "exports", Algorithm: core.Concurrency, Quota: 4,
			Window: 10 * time.Minute, // the lease of a slot in Redis
			Key:    keyfunc.Tenant(tenantKey{}),
		}},
	})
	exports := nethttp.MustMiddleware(eng, core.Use("exports"))
	mux := http.NewServeMux()
	mux.Handle("POST /exports", exports(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted) // the export runs here, holding its slot
	})))
	// The application's authentication sets the tenant.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Tenant"))))
		})
	}
	srv := httptest.NewServer(auth(mux))
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/exports", nil)
	req.Header.Set("X-Tenant", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	fmt.Println(resp.Header.Get("RateLimit-Policy"))
	fmt.Println(resp.Header.Get("RateLimit"))
	// Output:
	// 202
	// "exports";q=4;qu="concurrent-requests"
	// "exports";r=3
}
