// Command nethttp serves the Tenant API example on net/http's ServeMux.
//
//	go run ./examples/tenantapi/nethttp                          # budgets in memory
//	go run ./examples/tenantapi/nethttp -redis 127.0.0.1:6379    # budgets in Redis
//
// See examples/tenantapi/README.md for the routes, their budgets and curl
// lines to try.
package main

import (
	"io"
	"net/http"

	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/tenantapi"
	"github.com/quotagate/quotagate/nethttp"
)

func main() { tenantapi.Main(build) }

// build registers every route as authenticate → budgets → handler.
func build(api *tenantapi.API) (tenantapi.Server, error) {
	mux := http.NewServeMux()
	for _, rt := range api.Routes() {
		var h http.Handler = handler(rt)
		h = nethttp.ForLayer(rt.Layer)(h) // the route's budgets
		h = authenticate(rt.Access, h)    // 401 before any budget is charged
		mux.Handle(rt.Method+" "+rt.Path, h)
	}
	return serve.HTTPServer(mux), nil
}

// authenticate answers 401 to a request without a valid credential for
// access, and stores the caller's identity in the request's context, where
// the budgets' key functions read it.
func authenticate(access tenantapi.Access, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := tenantapi.Authenticate(access, r.Header.Values("Authorization"))
		if !ok {
			write(w, tenantapi.Unauthorized())
			return
		}
		if access != tenantapi.Public {
			r = r.WithContext(tenantapi.WithIdentity(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

func handler(rt tenantapi.Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, tenantapi.MaxBody))
		if err != nil {
			write(w, tenantapi.BodyError(err))
			return
		}
		id, _ := tenantapi.IdentityFrom(r.Context())
		write(w, rt.Handle(&tenantapi.Call{Identity: id, Param: r.PathValue, Body: body}))
	})
}

func write(w http.ResponseWriter, rep tenantapi.Reply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.Status)
	_, _ = w.Write(rep.Body)
}
