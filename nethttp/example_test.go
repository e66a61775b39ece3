package nethttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// A route group's budget stacked with a stricter route budget. A denial in
// the inner layer refunds the outer one.
func ExampleMiddleware() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	eng := core.MustNew(core.Config{
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

// The one-call start: 100 requests per minute per client IP.
func ExampleLimitBy() {
	mw := nethttp.LimitBy(100, time.Minute, keyfunc.PeerIP())
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	// Output:
	// 200 "default";q=100;w=60
}

// Health checks skip the limit: no budget is spent and no rate-limit
// header field is written.
func ExampleSkip() {
	mw := nethttp.LimitBy(1, time.Minute, keyfunc.PeerIP(),
		nethttp.Skip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()

	for _, path := range []string{"/healthz", "/healthz", "/a", "/a"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%s %d %q\n", path, resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// /healthz 200 ""
	// /healthz 200 ""
	// /a 200 "\"default\";q=1;w=60"
	// /a 429 "\"default\";q=1;w=60"
}

// Brute-force protection on a login route: only failed logins (401) count,
// three per 15 minutes per client IP.
func Example_login() {
	login := nethttp.LimitBy(3, 15*time.Minute, keyfunc.PeerIP(),
		core.CountWhen(func(status int) bool { return status == http.StatusUnauthorized }))
	srv := httptest.NewServer(login(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "secret" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})))
	defer srv.Close()

	for _, password := range []string{"secret", "secret", "a", "b", "c", "secret"} {
		resp, err := http.PostForm(srv.URL, map[string][]string{"password": {password}})
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ")
	}
	fmt.Println()
	// Output:
	// 200 200 401 401 401 429
}
