package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// coreRequest builds the request view an adapter would build.
func coreRequest(r *http.Request) *core.Request {
	return &core.Request{Method: r.Method, Path: r.URL.Path, RemoteAddr: r.RemoteAddr, Header: r.Header, Context: r.Context()}
}

// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For, the
// client is the right-most address that is not the load balancer; what the
// client wrote itself is ignored.
func ExampleIP() {
	ipKey, err := keyfunc.IP(keyfunc.IPConfig{
		TrustedProxies: []string{"10.0.0.0/8"},
		Headers:        []keyfunc.Source{keyfunc.XForwardedFor},
	})
	if err != nil {
		panic(err)
	}

	viaProxy := httptest.NewRequest("GET", "/", nil)
	viaProxy.RemoteAddr = "10.1.2.3:40000"
	viaProxy.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.9") // 6.6.6.6 is spoofed
	k, _ := ipKey(coreRequest(viaProxy))
	fmt.Println(k)

	direct := httptest.NewRequest("GET", "/", nil)
	direct.RemoteAddr = "203.0.113.7:50000"
	direct.Header.Set("X-Forwarded-For", "198.51.100.9") // not from a trusted proxy: ignored
	k, _ = ipKey(coreRequest(direct))
	fmt.Println(k)

	v6 := httptest.NewRequest("GET", "/", nil)
	v6.RemoteAddr = "[2001:db8:1:2:a:b:c:d]:443"
	k, _ = ipKey(coreRequest(v6))
	fmt.Println(k)
	// Output:
	// 198.51.100.9
	// 203.0.113.7
	// 2001:db8:1:2::/64
}

// Behind Cloudflare, which overwrites CF-Connecting-IP, list its ranges
// (here two of them) and name the header.
func ExampleClientIPHeader() {
	ipKey, err := keyfunc.IP(keyfunc.IPConfig{
		TrustedProxies: []string{"173.245.48.0/20", "2400:cb00::/32"},
		Headers:        []keyfunc.Source{keyfunc.ClientIPHeader("CF-Connecting-IP")},
	})
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "173.245.48.10:443"
	r.Header.Set("CF-Connecting-IP", "198.51.100.9")
	k, _ := ipKey(coreRequest(r))
	fmt.Println(k)
	// Output: 198.51.100.9
}

// An unparsable entry written by a trusted proxy fails closed by default;
// the budget then keys such requests with a shared fallback bucket.
func ExampleMalformed() {
	strict, _ := keyfunc.IP(keyfunc.IPConfig{
		TrustedProxies: []string{"10.0.0.0/8"},
		Headers:        []keyfunc.Source{keyfunc.Forwarded},
	})
	lenient, _ := keyfunc.IP(keyfunc.IPConfig{
		TrustedProxies: []string{"10.0.0.0/8"},
		Headers:        []keyfunc.Source{keyfunc.Forwarded},
		OnMalformed:    keyfunc.MalformedUsePeer,
	})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:40000"
	r.Header.Set("Forwarded", "for=unknown")

	_, err := strict(coreRequest(r))
	fmt.Println(errors.Is(err, core.ErrNoKey), err)
	k, _ := lenient(coreRequest(r))
	fmt.Println(k)

	// What a budget does with the strict key's error:
	_ = core.Budget{
		Name: "per_ip", Quota: 100, Window: time.Minute, Key: strict,
		MissingKey: core.MissingKeyFallback, FallbackKey: keyfunc.Constant("unparsable-client"),
	}
	// Output:
	// true keyfunc: unparsable entry in the Forwarded chain
	// 10.0.0.1
}

// API keys are hashed before they become a partition: the raw key never
// reaches the store, the logs or the metrics.
func ExampleAPIKey() {
	hasher, err := keyfunc.NewHasher(keyfunc.HashConfig{
		Secret: keyfunc.Secret("an application secret of 32 byte"), // load it from your secret store
	})
	if err != nil {
		panic(err)
	}
	apiKey, err := keyfunc.APIKey(keyfunc.APIKeyConfig{Hasher: hasher, Scheme: "Bearer", Header: "X-API-Key"})
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer sk_live_abc123")
	k, _ := apiKey(coreRequest(r))
	fmt.Println(k, k == hasher.Sum("sk_live_abc123"))

	_, err = apiKey(coreRequest(httptest.NewRequest("GET", "/", nil)))
	fmt.Println(err)
	// Output:
	// 320cdf522cbfa66fd31ec20830ca8781 true
	// keyfunc: no API key in the request
}

type tenantKey struct{}
type operatorKey struct{}

// Per-(tenant, operator) budgets on sensitive endpoints, keyed by what the
// authentication middleware stored in the request context.
func ExampleComposite() {
	kf := keyfunc.Composite(keyfunc.Tenant(tenantKey{}), keyfunc.Operator(operatorKey{}))
	ctx := context.WithValue(context.Background(), tenantKey{}, "acme")
	ctx = context.WithValue(ctx, operatorKey{}, "alice")
	k, _ := kf(&core.Request{Context: ctx})
	fmt.Println(k)
	// Output: acme|alice
}

// The tenant when the request is authenticated, else the client IP.
func ExampleFirstOf() {
	kf := keyfunc.FirstOf(keyfunc.Tenant(tenantKey{}), keyfunc.PeerIP())

	anon := &core.Request{RemoteAddr: "198.51.100.9:1234", Context: context.Background()}
	k, _ := kf(anon)
	fmt.Println(k)

	authed := &core.Request{RemoteAddr: "198.51.100.9:1234", Context: context.WithValue(context.Background(), tenantKey{}, "acme")}
	k, _ = kf(authed)
	fmt.Println(k)
	// Output:
	// 1:198.51.100.9
	// 0:acme
}

// A complete server: a per-tenant budget that skips anonymous requests, a
// per-IP budget for everyone, and a global budget.
func Example() {
	ipKey, err := keyfunc.IP(keyfunc.IPConfig{}) // the peer address: no proxy in front
	if err != nil {
		panic(err)
	}
	eng, err := core.New(core.Config{
		Store: memstore.MustNew(memstore.Config{}),
		Budgets: []core.Budget{
			{Name: "per_tenant", Quota: 1000, Window: time.Minute, Key: keyfunc.Tenant(tenantKey{}), KeyClass: "tenant",
				MissingKey: core.MissingKeySkip}, // per_ip limits anonymous requests
			{Name: "per_ip", Quota: 2, Window: time.Minute, Key: ipKey, KeyClass: "ip"},
			{Name: "global", Quota: 10000, Window: time.Second, Key: keyfunc.Global(), KeyClass: "global"},
		},
	})
	if err != nil {
		panic(err)
	}
	limit, err := nethttp.Middleware(eng, core.Use("per_tenant", "per_ip", "global"))
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()
	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 200
	// 200
	// 429
}
