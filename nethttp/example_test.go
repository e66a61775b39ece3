package nethttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// A route group's budget stacked with a stricter route budget. A denial in
// the inner layer refunds the outer one.
func ExampleMiddleware() {
	store := core.MustMemoryStore(core.MemoryConfig{})
	defer store.Close()
	eng := core.Must(core.Config{
		Store: store,
		Budgets: []core.Budget{
			{Name: "per_ip", Quota: 60, Window: time.Minute, Key: keyfunc.PeerIP()},
			{Name: "writes", Quota: 1, Window: time.Minute, Key: keyfunc.PeerIP()},
		},
	})
	group := nethttp.MustMiddleware(eng, core.Use("per_ip"))
	writes := nethttp.MustMiddleware(eng, core.Use("writes"))
	mux := http.NewServeMux()
	mux.Handle("POST /items", writes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	srv := httptest.NewServer(group(mux))
	defer srv.Close()

	for i := 0; i < 2; i++ {
		resp, err := http.Post(srv.URL+"/items", "", nil)
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 201 "per_ip";q=60;w=60, "writes";q=1;w=60
	// 429 "per_ip";q=60;w=60, "writes";q=1;w=60
}
