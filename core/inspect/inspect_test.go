package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/inspect"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// secretKey is a partition key the tests look for in every answer an
// unauthorized client gets.
const secretKey = "tenant-7f3a"

type fixture struct {
	eng    *core.Engine
	recent *inspect.Recent
	app    *httptest.Server // the limited application
}

func newFixture(t *testing.T, store core.Store) *fixture {
	t.Helper()
	windowtest.ClearOfEdge(t, time.Hour) // the tests count on per_tenant's hour window
	recent := inspect.NewRecent(4)
	tenant := func(r *core.Request) (string, error) {
		if v := r.Header.Get("X-Tenant"); v != "" {
			return v, nil
		}
		return "", core.ErrNoKey
	}
	eng, err := core.New(core.Config{
		Store:    store,
		Observer: observe.Multi(recent),
		Budgets: []core.Budget{
			{Name: "per_tenant", Quota: 3, Window: time.Hour, Key: tenant, KeyClass: "tenant", FailureMode: core.FailClosed},
			{Name: "bucket", Algorithm: core.TokenBucket, Quota: 10, Burst: 5, Window: time.Hour, Key: tenant, KeyClass: "tenant"},
			{Name: "per_ip", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP(), KeyClass: "ip"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	outer := nethttp.MustMiddleware(eng, core.Use("per_ip"))
	inner := nethttp.MustMiddleware(eng, core.Use("per_tenant", "bucket"), core.Cost(1))
	mux := http.NewServeMux()
	mux.Handle("GET /orders", outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))))
	app := httptest.NewServer(mux)
	t.Cleanup(app.Close)
	return &fixture{eng: eng, recent: recent, app: app}
}

// spend sends n requests of tenant to the app and returns their statuses.
func (f *fixture) spend(t *testing.T, tenant string, n int) []int {
	t.Helper()
	var codes []int
	for range n {
		req, _ := http.NewRequest("GET", f.app.URL+"/orders", nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

func get(t *testing.T, url string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

type report struct {
	BreakerOpen bool `json:"breaker_open"`
	Budgets     []struct {
		Name, Algorithm, Window string
		KeyClass                string `json:"key_class"`
		FailMode                string `json:"fail_mode"`
		Quota, Burst            int64
		Layers                  []int
		Routes                  []string
	}
	Layers []struct {
		Index   int
		Budgets []struct {
			Budget string
			Cost   int64
		}
	}
	Lookup *struct {
		Key, Error string
		Budgets    []struct {
			Budget           string
			Quota, Remaining int64
			ResetSeconds     float64 `json:"reset_seconds"`
		}
	}
	Denials []inspect.Event `json:"recent_denials"`
}

func TestConfigRequiresAuthorize(t *testing.T) {
	eng := newFixture(t, memstore.MustNew(memstore.Config{SweepInterval: -1})).eng
	_, err := inspect.New(inspect.Config{Engine: eng})
	var ce *core.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "Authorize") {
		t.Fatalf("New without Authorize: %v, want a ConfigError naming Authorize", err)
	}
	if _, err := inspect.New(inspect.Config{Authorize: inspect.Loopback}); err == nil {
		t.Error("New without an engine: no error")
	}
}

func TestNothingLeaksWithoutAccess(t *testing.T) {
	f := newFixture(t, memstore.MustNew(memstore.Config{SweepInterval: -1}))
	f.spend(t, secretKey, 5) // two denials recorded, with the key
	var asked atomic.Int32
	h := inspect.MustNew(inspect.Config{Engine: f.eng, Recent: f.recent,
		Authorize: func(r *http.Request) bool { asked.Add(1); return r.Header.Get("X-Operator") == "yes" }})
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, q := range []string{"", "?key=" + secretKey, "?format=json&key=" + secretKey} {
		for _, accept := range []string{"text/html", "application/json"} {
			code, hdr, body := get(t, srv.URL+q, "Accept", accept)
			if code != http.StatusForbidden {
				t.Errorf("GET %q: %d, want 403", q, code)
			}
			for _, leak := range []string{secretKey, "per_tenant", "bucket", "per_ip", "fixed_window", "token_bucket", "breaker"} {
				if strings.Contains(body, leak) || strings.Contains(strings.Join(hdrValues(hdr), " "), leak) {
					t.Errorf("GET %q without access leaks %q: %q", q, leak, body)
				}
			}
		}
	}
	code, _, body := get(t, srv.URL+"?format=json&key="+secretKey, "X-Operator", "yes")
	if code != 200 || !strings.Contains(body, secretKey) || !strings.Contains(body, "per_tenant") {
		t.Errorf("with access: %d %s", code, body)
	}
	if asked.Load() != 7 {
		t.Errorf("Authorize asked %d times, want 7 (once per request)", asked.Load())
	}
	if code, _, _ := get(t, srv.URL, "X-Operator", "yes"); code != 200 {
		t.Errorf("HTML with access: %d", code)
	}
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("X-Operator", "yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

func hdrValues(h http.Header) []string {
	var out []string
	for k, v := range h {
		out = append(out, k)
		out = append(out, v...)
	}
	return out
}

func TestReportOnMemory(t *testing.T) {
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	f := newFixture(t, store)
	codes := f.spend(t, secretKey, 5)
	if want := []int{200, 200, 200, 429, 429}; !equalInts(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	entries := store.Len()
	srv := httptest.NewServer(inspect.MustNew(inspect.Config{Engine: f.eng, Recent: f.recent, Authorize: inspect.Loopback, Title: "orders-api"}))
	defer srv.Close()

	rep := fetchReport(t, srv.URL+"?format=json&key="+secretKey)
	checkReport(t, rep)
	if n := store.Len(); n != entries {
		t.Errorf("the lookup changed the memory store's entries: %d, then %d", entries, n)
	}
	// Looking up charged nothing: another lookup sees the same, and a
	// fresh key shows full budgets.
	again := fetchReport(t, srv.URL+"?format=json&key="+secretKey)
	if again.Lookup.Budgets[0].Remaining != 2 {
		t.Errorf("second lookup: bucket remaining %d, want 2", again.Lookup.Budgets[0].Remaining)
	}
	if fresh := fetchReport(t, srv.URL+"?format=json&key=nobody"); fresh.Lookup.Budgets[2].Remaining != 3 {
		t.Errorf("fresh key: %+v", fresh.Lookup)
	}

	// The HTML page has the same content.
	code, hdr, body := get(t, srv.URL+"?key="+secretKey)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("HTML: %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{"orders-api", "per_tenant", "token_bucket", "fail_closed", `id="lookup"`, secretKey, "rate_limited", "GET /orders", `id="breaker">closed`} {
		if !strings.Contains(body, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	// A key is text, never markup.
	if _, _, body := get(t, srv.URL+"?key=%3Cscript%3Ealert(1)%3C/script%3E"); strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;") {
		t.Error("a looked-up key reaches the page unescaped")
	}
	// Loopback refuses a forwarded request even from 127.0.0.1.
	if code, _, _ := get(t, srv.URL, "X-Forwarded-For", "198.51.100.9"); code != 403 {
		t.Errorf("forwarded request: %d, want 403", code)
	}
}

func fetchReport(t *testing.T, url string) report {
	t.Helper()
	code, hdr, body := get(t, url)
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s\n%s", url, code, hdr.Get("Content-Type"), body)
	}
	var rep report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkReport checks the report of the fixture after 5 requests of
// secretKey (3 allowed, 2 denied by per_tenant).
func checkReport(t *testing.T, rep report) {
	t.Helper()
	if len(rep.Budgets) != 3 || rep.Budgets[0].Name != "bucket" || rep.Budgets[1].Name != "per_ip" || rep.Budgets[2].Name != "per_tenant" {
		t.Fatalf("budgets %+v", rep.Budgets)
	}
	b, ip, pt := rep.Budgets[0], rep.Budgets[1], rep.Budgets[2]
	if b.Algorithm != "token_bucket" || b.Burst != 5 || b.FailMode != "fail_open" || !equalInts(b.Layers, []int{1}) {
		t.Errorf("bucket: %+v", b)
	}
	if ip.KeyClass != "ip" || ip.Window != "1m0s" || !equalInts(ip.Layers, []int{0}) {
		t.Errorf("per_ip: %+v", ip)
	}
	if pt.FailMode != "fail_closed" || pt.Quota != 3 || pt.KeyClass != "tenant" {
		t.Errorf("per_tenant: %+v", pt)
	}
	for _, b := range rep.Budgets {
		if len(b.Routes) != 1 || b.Routes[0] != "GET /orders" {
			t.Errorf("%s: routes %v, want [GET /orders]", b.Name, b.Routes)
		}
	}
	if len(rep.Layers) != 2 || len(rep.Layers[1].Budgets) != 2 || rep.Layers[1].Budgets[0].Budget != "per_tenant" || rep.Layers[1].Budgets[1].Cost != 1 {
		t.Errorf("layers %+v", rep.Layers)
	}
	lk := rep.Lookup
	if lk == nil || lk.Key != secretKey || lk.Error != "" || len(lk.Budgets) != 3 {
		t.Fatalf("lookup %+v", lk)
	}
	// bucket: burst 5, 3 charged; per_ip is keyed by IP, so the tenant's
	// key holds nothing there; per_tenant: 3 of 3 spent.
	if got := lk.Budgets[0]; got.Budget != "bucket" || got.Remaining != 2 || got.Quota != 10 {
		t.Errorf("bucket for the key: %+v", got)
	}
	if got := lk.Budgets[1]; got.Remaining != 100 {
		t.Errorf("per_ip for a tenant key: %+v", got)
	}
	if got := lk.Budgets[2]; got.Remaining != 0 || got.ResetSeconds <= 0 || got.ResetSeconds > 3600 {
		t.Errorf("per_tenant for the key: %+v", got)
	}
	if rep.BreakerOpen {
		t.Error("breaker open")
	}
	if len(rep.Denials) != 2 {
		t.Fatalf("recent denials %+v, want 2", rep.Denials)
	}
	for _, d := range rep.Denials {
		if d.Budget != "per_tenant" || d.Key != secretKey || d.Reason != "rate_limited" || d.Method != "GET" || d.RetryAfter <= 0 {
			t.Errorf("denial %+v", d)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// counter counts the commands and pipelines a go-redis client sends.
type counter struct{ calls atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.calls.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.calls.Add(1)
		return next(ctx, cmds)
	}
}

func TestReportOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	calls := &counter{}
	client.AddHook(calls)
	store, err := redisstore.New(client, redisstore.Config{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, store)
	f.spend(t, secretKey, 5)
	h := httptest.NewServer(inspect.MustNew(inspect.Config{Engine: f.eng, Recent: f.recent, Authorize: inspect.Loopback}))
	defer h.Close()

	before := calls.calls.Load()
	rep := fetchReport(t, h.URL+"?format=json&key="+secretKey)
	if n := calls.calls.Load() - before; n != 1 {
		t.Errorf("a lookup on Redis sent %d commands, want 1 (one script run)", n)
	}
	checkReport(t, rep)
	// The lookup charged nothing: the counts are where five requests left
	// them, and one more request is still denied by per_tenant alone.
	again := fetchReport(t, h.URL+"?format=json&key="+secretKey)
	if again.Lookup.Budgets[0].Remaining != 2 || again.Lookup.Budgets[2].Remaining != 0 {
		t.Errorf("after a lookup: %+v", again.Lookup)
	}
	// A key never used: full budgets, and a lookup writes nothing: the
	// store holds as many keys as before, none for the fresh key.
	keys := client.DBSize(context.Background()).Val()
	fresh := fetchReport(t, h.URL+"?format=json&key=fresh-tenant")
	if fresh.Lookup.Budgets[2].Remaining != 3 || fresh.Lookup.Budgets[0].Remaining != 5 {
		t.Errorf("fresh key: %+v", fresh.Lookup)
	}
	if n := client.Exists(context.Background(), store.Key("fresh-tenant")).Val(); n != 0 {
		t.Errorf("after looking a fresh key up, %s exists: a lookup must not write", store.Key("fresh-tenant"))
	}
	if after := client.DBSize(context.Background()).Val(); after != keys {
		t.Errorf("a lookup changed the number of keys from %d to %d", keys, after)
	}
	if codes := f.spend(t, "fresh-tenant", 4); !equalInts(codes, []int{200, 200, 200, 429}) {
		t.Errorf("after looking a fresh key up, its requests got %v, want the full quota of 3", codes)
	}
}

func TestRecentIsBoundedAndNewestFirst(t *testing.T) {
	f := newFixture(t, memstore.MustNew(memstore.Config{SweepInterval: -1}))
	// Each tenant gets 3; the 4th to 9th requests of one tenant are denied:
	// 6 denials through a ring of 4.
	f.spend(t, "a", 9)
	d := f.recent.Denials()
	if len(d) != 4 || f.recent.DenialsSeen() != 6 {
		t.Fatalf("ring holds %d of %d denials, want 4 of 6", len(d), f.recent.DenialsSeen())
	}
	for i := 1; i < len(d); i++ {
		if d[i].Time.After(d[i-1].Time) {
			t.Errorf("denials not newest first: %v", d)
		}
	}
	var nilRecent *inspect.Recent
	nilRecent.ObserveError(core.KindStoreError, "", errors.New("x"))
	if nilRecent.Denials() != nil || nilRecent.Errors() != nil {
		t.Error("a nil Recent holds events")
	}
}

func TestRecentStoreErrorsAndBreaker(t *testing.T) {
	recent := inspect.NewRecent(8)
	eng := core.MustNew(core.Config{
		Store:            failingStore{},
		Observer:         recent,
		BreakerThreshold: 2,
		BreakerCooldown:  time.Hour,
		Budgets:          []core.Budget{{Name: "b", Quota: 1, Window: time.Second, Key: func(*core.Request) (string, error) { return "k", nil }}},
	})
	l := eng.MustLayer(core.Use("b"))
	for range 3 {
		var d core.Decision
		l.Decide(&core.Request{Method: "GET"}, &d)
	}
	errs := recent.Errors()
	if len(errs) != 3 || errs[0].Kind != "breaker_open" || errs[2].Kind != "store_error" || !strings.Contains(errs[2].Error, "disk on fire") {
		t.Fatalf("errors %+v", errs)
	}
	srv := httptest.NewServer(inspect.MustNew(inspect.Config{Engine: eng, Recent: recent, Authorize: inspect.Loopback}))
	defer srv.Close()
	_, _, body := get(t, srv.URL)
	if !strings.Contains(body, `id="breaker">open`) || !strings.Contains(body, "disk on fire") {
		t.Errorf("page does not show the open breaker and the error:\n%s", body)
	}
	// A lookup reports the store's error instead of numbers.
	if rep := fetchReport(t, srv.URL+"?format=json&key=k"); rep.Lookup == nil || !strings.Contains(rep.Lookup.Error, "disk on fire") || !rep.BreakerOpen {
		t.Errorf("lookup on a failing store: %+v", rep.Lookup)
	}
}

type failingStore struct{}

func (failingStore) Take(context.Context, []core.Item, []core.Outcome) error {
	return errors.New("disk on fire")
}
func (failingStore) Refund(context.Context, []core.Item, []core.Outcome) error { return nil }
func (failingStore) Peek(context.Context, []core.Item, []core.Outcome) error {
	return errors.New("disk on fire")
}

func TestAllowedRequestsCostRecentNothing(t *testing.T) {
	recent := inspect.NewRecent(0)
	d := &core.Decision{Allowed: true, Results: []core.Result{{Item: core.Item{Budget: "b", Key: "k"}, Outcome: core.Outcome{Allowed: true}}}}
	r := &core.Request{Method: "GET", Path: "/x/1", Route: "/x/{id}"}
	recent.ObserveDecision(r, d, d.Results, time.Microsecond) // learns the route
	if a := testing.AllocsPerRun(100, func() { recent.ObserveDecision(r, d, d.Results, time.Microsecond) }); a != 0 {
		t.Errorf("observing an allowed decision allocates %v times", a)
	}
	if len(recent.Denials()) != 0 {
		t.Error("an allowed decision was recorded")
	}
	if got := recent.Routes(); len(got) != 1 || len(got["b"]) != 1 || got["b"][0] != "GET /x/{id}" {
		t.Errorf("routes %v, want b: [GET /x/{id}]", got)
	}
	// Routes are bounded, and requests without a route pattern are not
	// remembered.
	for i := range inspect.MaxRoutes + 10 {
		recent.ObserveDecision(&core.Request{Method: "GET", Route: "/r" + strconv.Itoa(i)}, d, d.Results, 0)
		recent.ObserveDecision(&core.Request{Method: "GET", Path: "/p" + strconv.Itoa(i)}, d, d.Results, 0)
	}
	if n := len(recent.Routes()["b"]); n != inspect.MaxRoutes {
		t.Errorf("%d routes kept, want the bound %d", n, inspect.MaxRoutes)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.8.9.10:1": true, "[::1]:80": true, "[::ffff:127.0.0.1]:80": true,
		"192.0.2.1:80": false, "[2001:db8::1]:80": false, "garbage": false, "": false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr, r.Host = addr, "127.0.0.1:8081"
		if got := inspect.Loopback(r); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestLoopbackChecksHost: a loopback connection whose Host is not a
// loopback name or address is refused, so that a page on evil.example
// whose name was rebound to 127.0.0.1 cannot read the inspection page
// through a local browser.
func TestLoopbackChecksHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8081": true, "LOCALHOST:1": true, "app.localhost:80": true,
		"127.0.0.1:8081": true, "127.1.2.3": true, "[::1]:8081": true, "::1": true,
		"evil.example": false, "evil.example:8081": false, "192.0.2.1:8081": false, "": false,
		"localhost.evil.example": false, "127.0.0.1.evil.example:80": false, "[2001:db8::1]:80": false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr, r.Host = "127.0.0.1:40000", host
		if got := inspect.Loopback(r); got != want {
			t.Errorf("Loopback(Host %q) = %v, want %v", host, got, want)
		}
	}
}
