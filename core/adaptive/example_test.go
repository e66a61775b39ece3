package adaptive_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// An adaptive limit in front of a per-client budget on a net/http server.
// Reports are sheddable: they may use half of the limit, so they are shed
// first when the server is busy. The limit here is pinned at 2 to show a
// shed request; a real one sets Min and Max apart and lets the limit move.
func Example() {
	lim := adaptive.MustNew(adaptive.Config{
		Initial: 2, Min: 2, Max: 2,
		Priority: func(r *core.Request) adaptive.Priority {
			if strings.HasPrefix(r.Path, "/reports") {
				return adaptive.Sheddable
			}
			return adaptive.Critical
		},
	})
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng := core.MustNew(core.Config{
		Store:   store,
		Budgets: []core.Budget{{Name: "per_ip", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP()}},
	})
	limited := nethttp.MustMiddleware(eng, core.Use("per_ip"), core.GuardBy(lim))

	busy, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			busy <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok\n")
	})))
	defer srv.Close()

	done := make(chan struct{})
	go func() { // one request holds a place
		res, err := http.Get(srv.URL + "/slow")
		if err == nil {
			res.Body.Close()
		}
		close(done)
	}()
	<-busy
	for _, path := range []string{"/reports/daily", "/orders"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Printf("%s %d Retry-After=%q\n", path, res.StatusCode, res.Header.Get("Retry-After"))
	}
	close(release)
	<-done
	fmt.Printf("shed: %v\n", lim.Stats().Shed)
	// Output:
	// /reports/daily 503 Retry-After="1"
	// /orders 200 Retry-After=""
	// shed: [0 0 1]
}
