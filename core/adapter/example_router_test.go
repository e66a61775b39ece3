package adapter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
)

// A stacking adapter for a seventh router, from exported pieces only: the
// layers of one request share a pooled state through adapter.Shared, so a
// layer that a timeout middleware leaves running on its own goroutine
// never works on a state another request took over.

type state struct{ core.RequestState }

var states = sync.Pool{New: func() any { return new(state) }}

type sharedKey struct{}

// stack returns the router's middleware for layer l.
func stack(l *core.Layer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sh, _ := r.Context().Value(sharedKey{}).(*adapter.Shared[state])
			outermost := sh == nil
			var st *state
			if outermost {
				sh, st = new(adapter.Shared[state]), states.Get().(*state)
				sh.Start(st)
				st.Request = core.Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
					RemoteAddr: r.RemoteAddr, Header: r.Header, Context: r.Context()}
				r = r.WithContext(context.WithValue(r.Context(), sharedKey{}, sh))
			} else if st = sh.Enter(); st == nil {
				next.ServeHTTP(w, r) // every layer has finished: unlimited
				return
			}
			defer func() {
				if last := sh.Leave(outermost); last != nil {
					last.Reset()
					states.Put(last)
				}
			}()
			_ = l.Serve(&st.RequestState, &exchange{w: w, r: r, next: next})
		})
	}
}

// A concurrency budget of one slot behind net/http's TimeoutHandler: the
// first request's handler outlives the timeout (503), and its slot comes
// back when the handler returns, so the second request is served.
func Example_timeoutMiddleware() {
	eng := core.MustNew(core.Config{
		Store: memstore.MustNew(memstore.Config{}),
		Budgets: []core.Budget{
			{Name: "per_ip", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP()},
			{Name: "slots", Algorithm: core.Concurrency, Quota: 1, Window: time.Minute, Key: keyfunc.Constant("all")},
		},
	})
	outer, inner := stack(eng.MustLayer(core.Use("per_ip"))), stack(eng.MustLayer(core.Use("slots")))
	release, innerDone := make(chan struct{}), make(chan struct{}, 2)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("slow") {
			<-release
		}
	})
	afterInner := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { innerDone <- struct{}{} }()
			h.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(outer(http.TimeoutHandler(afterInner(inner(slow)), 50*time.Millisecond, "timeout")))
	defer srv.Close()
	get := func(q string) string {
		res, err := http.Get(srv.URL + q)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		return fmt.Sprint(res.StatusCode, " ", resetField.ReplaceAllString(res.Header.Get("RateLimit"), ""))
	}
	fmt.Println("first: ", get("?slow"))
	close(release)
	<-innerDone // the inner layer has given its slot back
	fmt.Println("second:", get(""))
	// Output:
	// first:  503 "per_ip";r=99
	// second: 200 "per_ip";r=98, "slots";r=0
}

// resetField matches a RateLimit member's reset, which depends on the clock.
var resetField = regexp.MustCompile(`;t=\d+`)
