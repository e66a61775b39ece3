package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/adaptertest"
	"github.com/quotagate/quotagate/nethttp"
)

// A skipped request reaches the handler without a store call or a
// rate-limit field, and needs no key.
func TestSkip(t *testing.T) {
	eng, store := adaptertest.Engine(t, 1, nil)
	mw := nethttp.MustMiddleware(eng, core.Use("b"),
		nethttp.Skip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for range 3 {
		adaptertest.WantSkipped(t, adaptertest.Get(t, srv.URL, "/healthz", ""), "/healthz")
	}
	if n := store.Takes(); n != 0 {
		t.Fatalf("skipped requests made %d store calls", n)
	}
	if r := adaptertest.Get(t, srv.URL, "/a", "k"); r.Status != 200 || store.Takes() != 1 {
		t.Fatalf("limited request: %d after %d store calls", r.Status, store.Takes())
	}
}

// OnDeny answers a denial with the rate-limit fields and Retry-After set,
// and DecisionFrom tells the handler why.
func TestOnDeny(t *testing.T) {
	eng, _ := adaptertest.Engine(t, 1, nil)
	mw := nethttp.MustMiddleware(eng, core.Use("b"), nethttp.OnDeny(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow down, "+nethttp.DecisionFrom(r.Context()).DeniedBy)
	})))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	if r := adaptertest.Get(t, srv.URL, "/", "k"); r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	adaptertest.WantDenied(t, adaptertest.Get(t, srv.URL, "/", "k"), 429, "slow down, b", "second request")
}
