package inspect_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/inspect"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// Mount the page beside the application, with a Recent observer for the
// denials, and look a client's key up as a script would.
func Example() {
	recent := inspect.NewRecent(0)
	eng := core.MustNew(core.Config{
		Store:    memstore.MustNew(memstore.Config{}),
		Observer: recent, // or observe.Multi(metrics, logs, recent)
		Budgets:  []core.Budget{{Name: "per_ip", Quota: 2, Window: time.Minute, Key: keyfunc.PeerIP(), KeyClass: "ip"}},
	})
	mux := http.NewServeMux()
	mux.Handle("/debug/quotagate", inspect.MustNew(inspect.Config{
		Engine:    eng,
		Recent:    recent,
		Authorize: inspect.Loopback, // who may see keys and budgets: required
	}))
	limit := nethttp.MustMiddleware(eng, core.Use("per_ip"))
	mux.Handle("/", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		resp, _ := http.Get(srv.URL + "/hello")
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + "/debug/quotagate?format=json&key=127.0.0.1")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var page struct {
		Lookup struct {
			Budgets []struct {
				Budget    string
				Remaining int64
			}
		}
		Denials []inspect.Event `json:"recent_denials"`
	}
	json.NewDecoder(resp.Body).Decode(&page)
	fmt.Println(page.Lookup.Budgets[0].Budget, "remaining:", page.Lookup.Budgets[0].Remaining)
	fmt.Println("denied:", page.Denials[0].Budget, page.Denials[0].Key, page.Denials[0].Route)
	// Output:
	// per_ip remaining: 0
	// denied: per_ip 127.0.0.1 /
}
