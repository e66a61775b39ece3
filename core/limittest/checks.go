package limittest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// AllowDeny checks allow and deny counts per budget: a token bucket and a
// sliding log admit exactly their quota, each budget counts on its own, a
// layer with two budgets is all-or-nothing (the one that still had room is
// not charged when the other denies), and a denied request never reaches
// the handler.
func AllowDeny(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "small", Algorithm: core.TokenBucket, Quota: 3, Window: time.Hour, Key: byClient},
		core.Budget{Name: "large", Algorithm: core.SlidingLog, Quota: 5, Window: time.Hour, Key: byClient},
	)
	var a, b, both counter
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/a", &a, layer(t, eng, core.Use("small"))),
		route(http.MethodPost, "/b", &b, layer(t, eng, core.Use("large"))),
		route(http.MethodPost, "/both", &both, layer(t, eng, core.Use("large", "small"))),
	}}}}
	c := newClient(t, cfg.Serve(t, app))

	id := newID()
	for i := 1; i <= 5; i++ {
		r := c.do(http.MethodPost, "/a", ClientHeader, id)
		what := fmt.Sprintf("/a request %d", i)
		if i <= 3 {
			wantStatus(t, r, http.StatusOK, what)
			wantLimits(t, r, what, "small", 3-i)
		} else {
			wantStatus(t, r, http.StatusTooManyRequests, what)
			wantLimits(t, r, what, "small", 0)
		}
	}
	for i := 1; i <= 7; i++ {
		r := c.do(http.MethodPost, "/b", ClientHeader, id)
		what := fmt.Sprintf("/b request %d", i)
		if i <= 5 {
			wantStatus(t, r, http.StatusOK, what)
			wantLimits(t, r, what, "large", 5-i)
		} else {
			wantStatus(t, r, http.StatusTooManyRequests, what)
			wantLimits(t, r, what, "large", 0)
		}
	}

	id2 := newID()
	for i := 1; i <= 4; i++ {
		r := c.do(http.MethodPost, "/both", ClientHeader, id2)
		what := fmt.Sprintf("/both request %d", i)
		if i <= 3 {
			wantStatus(t, r, http.StatusOK, what)
			wantLimits(t, r, what, "large", 5-i, "small", 3-i)
		} else {
			wantStatus(t, r, http.StatusTooManyRequests, what)
			wantLimits(t, r, what, "large", 2, "small", 0) // large not charged
		}
	}
	// The denied request left "large" untouched: two more pass.
	for i := 1; i <= 3; i++ {
		r := c.do(http.MethodPost, "/b", ClientHeader, id2)
		what := fmt.Sprintf("/b after /both, request %d", i)
		if i <= 2 {
			wantStatus(t, r, http.StatusOK, what)
			wantLimits(t, r, what, "large", 2-i)
		} else {
			wantStatus(t, r, http.StatusTooManyRequests, what)
		}
	}
	if n := a.n.Load(); n != 3 {
		t.Errorf("/a handler ran %d times, want 3", n)
	}
	if n := b.n.Load(); n != 7 {
		t.Errorf("/b handler ran %d times, want 7", n)
	}
	if n := both.n.Load(); n != 3 {
		t.Errorf("/both handler ran %d times, want 3", n)
	}
}

// Concurrent checks that concurrent requests on one key are admitted
// exactly up to the quota, each allowed one seeing a distinct remaining
// count, with no state shared between requests (run it with -race).
func Concurrent(t *testing.T, cfg Config) {
	const quota, requests = 10, 24
	eng := engine(t, cfg, core.Budget{Name: "burst", Algorithm: core.TokenBucket, Quota: quota, Window: time.Hour, Key: byClient})
	var hits counter
	app := App{Groups: []Group{{Routes: []Route{route(http.MethodPost, "/burst", &hits, layer(t, eng, core.Use("burst")))}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()

	var (
		mu        sync.Mutex
		ok, limit int
		seen      []int64
		errs      []error
		wg        sync.WaitGroup
	)
	start := make(chan struct{})
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := c.send(http.MethodPost, "/burst", ClientHeader, id)
			var rec recorder
			_, rem := limits(&rec, r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case len(rec.errs) > 0:
				errs = append(errs, errors.New(rec.errs[0]))
			case r.Status == http.StatusOK:
				ok++
				seen = append(seen, rem["burst"])
			case r.Status == http.StatusTooManyRequests:
				limit++
			default:
				errs = append(errs, fmt.Errorf("status %d", r.Status))
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if ok != quota || limit != requests-quota {
		t.Errorf("%d concurrent requests: %d allowed, %d denied; want %d and %d", requests, ok, limit, quota, requests-quota)
	}
	slices.Sort(seen)
	want := make([]int64, 0, quota)
	for i := int64(0); i < quota && len(seen) == quota; i++ {
		want = append(want, i)
	}
	if !slices.Equal(seen, want) {
		t.Errorf("remaining counts of the allowed requests %v, want each of 0..%d once", seen, quota-1)
	}
	if n := hits.n.Load(); n != quota {
		t.Errorf("handler ran %d times, want %d", n, quota)
	}
}

// HeaderStyles checks every header style, field by field, on allowed and
// denied responses: the IETF structured fields, the draft
// RateLimit-Limit/-Remaining/-Reset, X-RateLimit-* with delta and epoch
// reset, and none; a denial carries Retry-After in every style.
func HeaderStyles(t *testing.T, cfg Config) {
	const quota, window, interval = 4, 60, 15 // interval = window/quota seconds
	eng := engine(t, cfg, core.Budget{Name: "hs", Algorithm: core.TokenBucket, Quota: quota, Window: window * time.Second, Key: byClient})
	styles := []struct {
		name  string
		style core.HeaderStyle
	}{
		{"ietf", core.HeadersIETF}, {"draft", core.HeadersDraft}, {"x", core.HeadersX},
		{"xepoch", core.HeadersXEpoch}, {"none", core.HeadersNone},
	}
	var routes []Route
	for _, s := range styles {
		routes = append(routes, route(http.MethodPost, "/"+s.name, nil, layer(t, eng, core.Use("hs"), core.Headers(s.style))))
	}
	c := newClient(t, cfg.Serve(t, App{Groups: []Group{{Routes: routes}}}))

	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			oneSecond(t, func(t reporter, id string) {
				for k := int64(1); k <= quota+1; k++ {
					before := time.Now().Unix()
					r := c.do(http.MethodPost, "/"+s.name, ClientHeader, id)
					after := time.Now().Unix()
					what := fmt.Sprintf("%s request %d", s.name, k)
					denied := k > quota
					rem, reset := quota-k, k*interval
					if denied {
						rem, reset = 0, interval
						wantStatus(t, r, http.StatusTooManyRequests, what)
						wantHeader(t, r, core.HeaderRetryAfter, strconv.Itoa(interval), what)
					} else {
						wantStatus(t, r, http.StatusOK, what)
						wantNoHeader(t, r, what, core.HeaderRetryAfter)
					}
					switch s.style {
					case core.HeadersIETF:
						wantHeader(t, r, core.HeaderPolicy, policy("hs", quota, window), what)
						wantHeader(t, r, core.HeaderRateLimit, limit("hs", rem, reset), what)
						wantNoHeader(t, r, what, exceptFields(core.HeaderPolicy, core.HeaderRateLimit)...)
					case core.HeadersDraft:
						wantHeader(t, r, core.HeaderLimit, strconv.Itoa(quota), what)
						wantHeader(t, r, core.HeaderRemaining, strconv.FormatInt(rem, 10), what)
						wantHeader(t, r, core.HeaderReset, strconv.FormatInt(reset, 10), what)
						wantNoHeader(t, r, what, exceptFields(core.HeaderLimit, core.HeaderRemaining, core.HeaderReset)...)
					case core.HeadersX, core.HeadersXEpoch:
						wantHeader(t, r, core.HeaderXLimit, strconv.Itoa(quota), what)
						wantHeader(t, r, core.HeaderXRemaining, strconv.FormatInt(rem, 10), what)
						if s.style == core.HeadersX {
							wantHeader(t, r, core.HeaderXReset, strconv.FormatInt(reset, 10), what)
						} else {
							v, err := strconv.ParseInt(header(t, r, core.HeaderXReset), 10, 64)
							if err != nil || v < before+reset || v > after+reset {
								t.Errorf("%s: %s = %q, want a Unix time in [%d, %d]", what, core.HeaderXReset, header(t, r, core.HeaderXReset), before+reset, after+reset)
							}
						}
						wantNoHeader(t, r, what, exceptFields(core.HeaderXLimit, core.HeaderXRemaining, core.HeaderXReset)...)
					case core.HeadersNone:
						wantNoHeader(t, r, what, rateLimitFields...)
					}
				}
			})
		})
	}
}

// problem is the part of an RFC 9457 body the suite reads.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Violated   []string `json:"violated-policies"`
	RetryAfter int64    `json:"retry-after"`
}

// wantProblem checks an RFC 9457 body; retryAfter < 0 skips its
// retry-after member.
func wantProblem(t reporter, r response, status int, typ, budget string, retryAfter int64, what string) {
	t.Helper()
	wantHeader(t, r, core.HeaderContentType, "application/problem+json", what)
	var p problem
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", what, r.Body, err)
		return
	}
	if p.Status != status || p.Type != typ || p.Title != http.StatusText(status) || (retryAfter >= 0 && p.RetryAfter != retryAfter) {
		t.Errorf("%s: problem %+v, want status %d, type %q, title %q, retry-after %d", what, p, status, typ, http.StatusText(status), retryAfter)
	}
	if budget != "" && !slices.Equal(p.Violated, []string{budget}) {
		t.Errorf("%s: violated-policies %q, want [%q]", what, p.Violated, budget)
	}
}

// RetryAfter checks the denial: 429, Retry-After in whole seconds equal to
// the t of the denying budget (never earlier), Cache-Control: no-store, an
// RFC 9457 body; and that a client that waits Retry-After gets through.
func RetryAfter(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "ra", Algorithm: core.TokenBucket, Quota: 1, Window: time.Second, Key: byClient},
		core.Budget{Name: "wide", Algorithm: core.TokenBucket, Quota: 100, Window: time.Hour, Key: byClient},
	)
	var hits counter
	app := App{Groups: []Group{{Routes: []Route{route(http.MethodPost, "/ra", &hits, layer(t, eng, core.Use("wide", "ra")))}}}}
	c := newClient(t, cfg.Serve(t, app))

	oneSecond(t, func(t reporter, id string) {
		before := hits.n.Load()
		r := c.do(http.MethodPost, "/ra", ClientHeader, id)
		wantStatus(t, r, http.StatusOK, "first request")
		r = c.do(http.MethodPost, "/ra", ClientHeader, id)
		what := "second request"
		if !wantStatus(t, r, http.StatusTooManyRequests, what) {
			return
		}
		wantHeader(t, r, core.HeaderRetryAfter, "1", what)
		wantHeader(t, r, core.HeaderCacheControl, "no-store", what)
		ms := members(t, r, core.HeaderRateLimit, []string{"r", "t"})
		if len(ms) != 2 || ms[1].name != "ra" || ms[1].params["r"] != 0 || ms[1].params["t"] != 1 || ms[0].params["r"] != 99 {
			t.Errorf("%s: RateLimit %q, want \"wide\" r=99 and \"ra\" r=0 t=1", what, r.Header.Values(core.HeaderRateLimit))
		}
		wantProblem(t, r, http.StatusTooManyRequests, core.ProblemQuotaExceeded, "ra", 1, what)
		if n := hits.n.Load() - before; n != 1 {
			t.Errorf("handler ran %d times for one allowed and one denied request", n)
		}
		time.Sleep(time.Second) // Retry-After
		r = c.do(http.MethodPost, "/ra", ClientHeader, id)
		wantStatus(t, r, http.StatusOK, "request after waiting Retry-After")
	})
}

// IgnoreMethods checks pass-through: a budget that ignores GET is neither
// evaluated, charged nor reported for GET requests, while POSTs spend it.
func IgnoreMethods(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "reads", Algorithm: core.TokenBucket, Quota: 100, Window: time.Hour, Key: byClient},
		core.Budget{Name: "writes", Algorithm: core.TokenBucket, Quota: 2, Window: time.Hour, Key: byClient,
			IgnoreMethods: []string{http.MethodGet, http.MethodHead, http.MethodOptions}},
	)
	var gets, posts counter
	app := App{Groups: []Group{{
		Prefix: "/shop",
		Layers: []*core.Layer{layer(t, eng, core.Use("reads", "writes"))},
		Routes: []Route{route(http.MethodGet, "/items", &gets), route(http.MethodPost, "/items", &posts)},
	}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	reads := 100
	get := func(what string) {
		t.Helper()
		r := c.do(http.MethodGet, "/shop/items", ClientHeader, id)
		reads--
		wantStatus(t, r, http.StatusOK, what)
		wantHeader(t, r, core.HeaderPolicy, policy("reads", 100, 3600), what)
		wantLimits(t, r, what, "reads", reads)
	}
	for i := 1; i <= 3; i++ {
		get(fmt.Sprintf("GET %d", i))
	}
	for i := 1; i <= 3; i++ {
		what := fmt.Sprintf("POST %d", i)
		r := c.do(http.MethodPost, "/shop/items", ClientHeader, id)
		wantHeader(t, r, core.HeaderPolicy, policy("reads", 100, 3600)+", "+policy("writes", 2, 3600), what)
		if i <= 2 {
			reads--
			wantStatus(t, r, http.StatusOK, what)
			wantLimits(t, r, what, "reads", reads, "writes", 2-i)
		} else {
			wantStatus(t, r, http.StatusTooManyRequests, what)
			wantLimits(t, r, what, "reads", reads, "writes", 0)
		}
	}
	get("GET after the writes budget ran out")
	if g, p := gets.n.Load(), posts.n.Load(); g != 4 || p != 2 {
		t.Errorf("handlers ran GET %d, POST %d times; want 4 and 2", g, p)
	}
}

// StackedLayers checks a group layer and a route layer as one
// all-or-nothing decision: when the inner layer denies, the outer
// layer's charge is refunded; when the outer denies, the inner is not
// evaluated.
func StackedLayers(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "outer", Algorithm: core.TokenBucket, Quota: 10, Window: time.Hour, Key: byClient},
		core.Budget{Name: "inner", Algorithm: core.TokenBucket, Quota: 2, Window: time.Hour, Key: byClient},
		core.Budget{Name: "gate", Algorithm: core.TokenBucket, Quota: 1, Window: time.Hour, Key: byClient},
		core.Budget{Name: "deep", Algorithm: core.TokenBucket, Quota: 5, Window: time.Hour, Key: byClient},
	)
	deep := layer(t, eng, core.Use("deep"))
	var inner, plain, gated counter
	app := App{Groups: []Group{
		{
			Prefix: "/stack",
			Layers: []*core.Layer{layer(t, eng, core.Use("outer"))},
			Routes: []Route{
				route(http.MethodPost, "/inner", &inner, layer(t, eng, core.Use("inner"))),
				route(http.MethodPost, "/plain", &plain),
			},
		},
		{
			Prefix: "/gated",
			Layers: []*core.Layer{layer(t, eng, core.Use("gate"))},
			Routes: []Route{route(http.MethodPost, "/deep", &gated, deep)},
		},
		{
			Prefix: "/open",
			Routes: []Route{route(http.MethodPost, "/deep", nil, deep)},
		},
	}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	for i := 1; i <= 2; i++ {
		what := fmt.Sprintf("/stack/inner %d", i)
		r := c.do(http.MethodPost, "/stack/inner", ClientHeader, id)
		wantStatus(t, r, http.StatusOK, what)
		wantHeader(t, r, core.HeaderPolicy, policy("outer", 10, 3600)+", "+policy("inner", 2, 3600), what)
		wantLimits(t, r, what, "outer", 10-i, "inner", 2-i)
	}
	r := c.do(http.MethodPost, "/stack/inner", ClientHeader, id)
	wantStatus(t, r, http.StatusTooManyRequests, "/stack/inner 3")
	wantLimits(t, r, "/stack/inner 3", "outer", 8, "inner", 0) // outer refunded
	wantProblem(t, r, http.StatusTooManyRequests, core.ProblemQuotaExceeded, "inner", -1, "/stack/inner 3")
	r = c.do(http.MethodPost, "/stack/plain", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/stack/plain")
	wantLimits(t, r, "/stack/plain", "outer", 7) // 8 before this request: the refund held
	if i, p := inner.n.Load(), plain.n.Load(); i != 2 || p != 1 {
		t.Errorf("handlers ran inner %d, plain %d times; want 2 and 1", i, p)
	}

	r = c.do(http.MethodPost, "/gated/deep", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/gated/deep 1")
	wantLimits(t, r, "/gated/deep 1", "gate", 0, "deep", 4)
	r = c.do(http.MethodPost, "/gated/deep", ClientHeader, id)
	wantStatus(t, r, http.StatusTooManyRequests, "/gated/deep 2")
	wantLimits(t, r, "/gated/deep 2", "gate", 0) // deep never evaluated
	r = c.do(http.MethodPost, "/open/deep", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/open/deep")
	wantLimits(t, r, "/open/deep", "deep", 3) // the denied request spent nothing
	if n := gated.n.Load(); n != 1 {
		t.Errorf("/gated/deep handler ran %d times, want 1", n)
	}
}

// Cost checks cost weights: a static per-route cost, the default cost of
// 1, a cost computed from a request header, a cost of 0 that reports
// without spending, a request that costs more than is left (denied,
// nothing charged), a negative or unreadable computed cost (400) and a
// computed cost larger than the budget can ever hold (429 without
// Retry-After).
func Cost(t *testing.T, cfg Config) {
	eng := engine(t, cfg, core.Budget{Name: "units", Algorithm: core.TokenBucket, Quota: 10, Window: time.Hour, Key: byClient})
	fromHeader := core.CostFrom(func(r *core.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
	})
	var computed counter
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/bulk", nil, layer(t, eng, core.Use("units"), core.Cost(3))),
		route(http.MethodPost, "/one", nil, layer(t, eng, core.Use("units"))),
		route(http.MethodPost, "/peek", nil, layer(t, eng, core.Use("units"), core.CostIn("units", 0))),
		route(http.MethodPost, "/computed", &computed, layer(t, eng, core.Use("units"), fromHeader)),
	}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	steps := []struct {
		path, cost string
		status     int
		remaining  int
	}{
		{"/bulk", "", 200, 7},
		{"/bulk", "", 200, 4},
		{"/one", "", 200, 3},
		{"/computed", "2", 200, 1},
		{"/bulk", "", 429, 1},
		{"/peek", "", 200, 1},
		{"/one", "", 200, 0},
		{"/peek", "", 200, 0},
	}
	for i, s := range steps {
		what := fmt.Sprintf("step %d %s", i+1, s.path)
		r := c.do(http.MethodPost, s.path, ClientHeader, id, "X-Cost", s.cost)
		wantStatus(t, r, s.status, what)
		wantLimits(t, r, what, "units", s.remaining)
	}
	for _, cost := range []string{"-1", "three"} {
		what := "computed cost " + cost
		r := c.do(http.MethodPost, "/computed", ClientHeader, id, "X-Cost", cost)
		wantStatus(t, r, http.StatusBadRequest, what)
		wantNoHeader(t, r, what, core.HeaderRetryAfter)
		wantProblem(t, r, http.StatusBadRequest, "about:blank", "", 0, what)
	}
	id2 := newID()
	r := c.do(http.MethodPost, "/computed", ClientHeader, id2, "X-Cost", "11")
	wantStatus(t, r, http.StatusTooManyRequests, "computed cost 11 of 10")
	wantNoHeader(t, r, "computed cost 11 of 10", core.HeaderRetryAfter)
	wantProblem(t, r, http.StatusTooManyRequests, core.ProblemQuotaExceeded, "units", 0, "computed cost 11 of 10")
	r = c.do(http.MethodPost, "/computed", ClientHeader, id2, "X-Cost", "10")
	wantStatus(t, r, http.StatusOK, "computed cost 10 of 10 after the refused 11")
	wantLimits(t, r, "computed cost 10 of 10", "units", 0)
	if n := computed.n.Load(); n != 2 {
		t.Errorf("/computed handler ran %d times, want 2", n)
	}
}

// byHeader keys a request by a credential in the named header; a
// core.MissingCredentialError when absent.
func byHeader(name string) core.KeyFunc {
	missing := &core.MissingCredentialError{Challenge: `APIKey header="` + name + `"`, Msg: "no " + name + " header"}
	return func(r *core.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", missing
	}
}

// MissingKey checks what happens when a key function finds no key: deny
// (the default: 401 with WWW-Authenticate for a missing credential, 400 for
// a missing key of another kind), skip the budget, or fall back to another
// key (here the peer address, which forwarding headers cannot change).
func MissingKey(t *testing.T, cfg Config) {
	salt := newID()
	byPeer := func(r *core.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return "", fmt.Errorf("remote address %q: %w", r.RemoteAddr, core.ErrNoKey)
		}
		return host + "|" + salt, nil
	}
	eng := engine(t, cfg,
		core.Budget{Name: "need", Algorithm: core.TokenBucket, Quota: 5, Window: time.Hour, Key: byHeader("X-Key")},
		core.Budget{Name: "skip", Algorithm: core.TokenBucket, Quota: 5, Window: time.Hour, Key: byHeader("X-Key"), MissingKey: core.MissingKeySkip},
		core.Budget{Name: "fall", Algorithm: core.TokenBucket, Quota: 2, Window: time.Hour, Key: byHeader("X-Key"),
			MissingKey: core.MissingKeyFallback, FallbackKey: byPeer},
		core.Budget{Name: "tenant", Algorithm: core.TokenBucket, Quota: 5, Window: time.Hour, Key: byClient},
	)
	var need counter
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/need", &need, layer(t, eng, core.Use("need"))),
		route(http.MethodPost, "/skip", nil, layer(t, eng, core.Use("skip"))),
		route(http.MethodPost, "/fall", nil, layer(t, eng, core.Use("fall"))),
		route(http.MethodPost, "/tenant", nil, layer(t, eng, core.Use("tenant"))),
	}}}}
	c := newClient(t, cfg.Serve(t, app))
	key := newID()

	r := c.do(http.MethodPost, "/need")
	wantStatus(t, r, http.StatusUnauthorized, "/need without a key")
	wantNoHeader(t, r, "/need without a key", append([]string{core.HeaderRetryAfter}, rateLimitFields...)...)
	wantProblem(t, r, http.StatusUnauthorized, "about:blank", "", 0, "/need without a key")
	wantHeader(t, r, "Www-Authenticate", `APIKey header="X-Key"`, "/need without a key")
	r = c.do(http.MethodPost, "/tenant")
	wantStatus(t, r, http.StatusBadRequest, "/tenant without a tenant")
	wantProblem(t, r, http.StatusBadRequest, "about:blank", "", 0, "/tenant without a tenant")
	wantNoHeader(t, r, "/tenant without a tenant", "Www-Authenticate")
	r = c.do(http.MethodPost, "/need", "X-Key", key)
	wantStatus(t, r, http.StatusOK, "/need with a key")
	wantLimits(t, r, "/need with a key", "need", 4)
	if n := need.n.Load(); n != 1 {
		t.Errorf("/need handler ran %d times, want 1", n)
	}

	r = c.do(http.MethodPost, "/skip")
	wantStatus(t, r, http.StatusOK, "/skip without a key")
	wantNoHeader(t, r, "/skip without a key", rateLimitFields...)
	r = c.do(http.MethodPost, "/skip", "X-Key", key)
	wantStatus(t, r, http.StatusOK, "/skip with a key")
	wantLimits(t, r, "/skip with a key", "skip", 4)

	for i := 1; i <= 3; i++ {
		what := fmt.Sprintf("/fall without a key %d", i)
		// Forwarding headers change on every request; the peer does not.
		fwd := fmt.Sprintf("203.0.113.%d", i)
		r = c.do(http.MethodPost, "/fall", "X-Forwarded-For", fwd, "X-Real-IP", fwd, "Forwarded", "for="+fwd)
		if i <= 2 {
			wantStatus(t, r, http.StatusOK, what)
			wantLimits(t, r, what, "fall", 2-i)
		} else {
			wantStatus(t, r, http.StatusTooManyRequests, what)
		}
	}
	r = c.do(http.MethodPost, "/fall", "X-Key", key)
	wantStatus(t, r, http.StatusOK, "/fall with a key")
	wantLimits(t, r, "/fall with a key", "fall", 1)
}

// view is what a key function saw of a request.
type view struct {
	method, route, path, query string
	remote                     string
	probe, absent              string
	multi, none                []string
	value, missing             any
	hasContext                 bool
}

var paramSyntax = regexp.MustCompile(`\{([^}]+)\}`)

// RequestView checks the request a key function sees: the method, the
// route pattern (in the router's syntax), the path and raw query, the transport peer
// address (never a forwarding header), headers (case-insensitive, every
// field line), the router's request-scoped values and the context.
func RequestView(t *testing.T, cfg Config) {
	views := make(chan view, 4)
	key := func(r *core.Request) (string, error) {
		v := view{
			method: r.Method, route: r.Route, path: r.Path, query: r.RawQuery, remote: r.RemoteAddr,
			probe: r.Header.Get("x-probe"), absent: r.Header.Get("X-Absent"),
			multi: r.Header.Values("X-Multi"), none: r.Header.Values("X-Absent"),
			value: r.Value(ValueKey), missing: r.Value("limittest.missing"),
			hasContext: r.Context != nil,
		}
		select {
		case views <- v:
		default:
		}
		return byClient(r)
	}
	eng := engine(t, cfg, core.Budget{Name: "view", Algorithm: core.TokenBucket, Quota: 10, Window: time.Hour, Key: key})
	app := App{Groups: []Group{{
		Prefix: "/v",
		Routes: []Route{route(http.MethodGet, "/users/:id", nil, layer(t, eng, core.Use("view")))},
	}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()

	r := c.do(http.MethodGet, "/v/users/42?a=1&b=%20x", ClientHeader, id,
		"X-Probe", "Hello", "X-Multi", "a", "X-Multi", "b", ValueHeader, "tenant-7",
		"X-Forwarded-For", "203.0.113.9", "X-Real-IP", "203.0.113.10", "Forwarded", "for=203.0.113.11")
	wantStatus(t, r, http.StatusOK, "GET /v/users/42")
	v := <-views
	got := paramSyntax.ReplaceAllString(v.route, ":$1")
	if v.method != http.MethodGet || got != "/v/users/:id" || v.path != "/v/users/42" || v.query != "a=1&b=%20x" {
		t.Errorf("key function saw method %q, route %q, path %q, query %q; want GET, /v/users/:id, /v/users/42, a=1&b=%%20x",
			v.method, v.route, v.path, v.query)
	}
	if v.remote != r.Local {
		t.Errorf("key function saw RemoteAddr %q, want the client's socket address %q", v.remote, r.Local)
	}
	if v.probe != "Hello" || v.absent != "" || !slices.Equal(v.multi, []string{"a", "b"}) || v.none != nil {
		t.Errorf("key function saw headers X-Probe %q, X-Absent %q, X-Multi %q, Values(X-Absent) %q; want Hello, \"\", [a b], nil",
			v.probe, v.absent, v.multi, v.none)
	}
	if v.value != "tenant-7" || v.missing != nil {
		t.Errorf("key function saw request value %v and %v for a missing key; want tenant-7 and nil", v.value, v.missing)
	}
	if !v.hasContext {
		t.Error("key function saw a nil Context")
	}

	// The next request on the connection sees its own values only.
	r = c.do(http.MethodGet, "/v/users/7", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "GET /v/users/7")
	wantLimits(t, r, "GET /v/users/7", "view", 8)
	v = <-views
	if v.path != "/v/users/7" || v.query != "" || v.value != nil || v.probe != "" || v.multi != nil {
		t.Errorf("second request: key function saw path %q, query %q, value %v, X-Probe %q, X-Multi %q; want /v/users/7 and nothing else",
			v.path, v.query, v.value, v.probe, v.multi)
	}
}

// ReplacedDenial checks a layer's own denial rendering: its status, headers
// and body are written as given, next to the rate-limit fields, and the
// handler does not run; a denial rendered with a success status is sent
// with the default denial's status instead.
func ReplacedDenial(t *testing.T, cfg Config) {
	eng := engine(t, cfg, core.Budget{Name: "rd", Algorithm: core.TokenBucket, Quota: 1, Window: time.Hour, Key: byClient})
	custom := core.Deny(func(r *core.Request, d *core.Decision) core.Denial {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("X-Denied-By", d.DeniedBy)
		h.Set("Retry-After", strconv.FormatInt(core.RetryAfterSeconds(d), 10))
		body := fmt.Sprintf(`{"error":"slow down","budget":%q,"path":%q}`, d.DeniedBy, r.Path)
		return core.Denial{Status: http.StatusTooManyRequests, Header: h, Body: []byte(body)}
	})
	bogus := core.Deny(func(*core.Request, *core.Decision) core.Denial {
		h := http.Header{}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		return core.Denial{Status: http.StatusOK, Header: h, Body: []byte("nope")}
	})
	var hits counter
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/custom", &hits, layer(t, eng, core.Use("rd"), custom)),
		route(http.MethodPost, "/bogus", nil, layer(t, eng, core.Use("rd"), bogus)),
	}}}}
	c := newClient(t, cfg.Serve(t, app))
	oneSecond(t, func(t reporter, id string) {
		before := hits.n.Load()
		wantStatus(t, c.do(http.MethodPost, "/custom", ClientHeader, id), http.StatusOK, "first request")
		r := c.do(http.MethodPost, "/custom", ClientHeader, id)
		what := "denied request"
		wantStatus(t, r, http.StatusTooManyRequests, what)
		if want := `{"error":"slow down","budget":"rd","path":"/custom"}`; r.Body != want {
			t.Errorf("%s: body %q, want %q", what, r.Body, want)
		}
		wantHeader(t, r, core.HeaderContentType, "application/json", what)
		wantHeader(t, r, "X-Denied-By", "rd", what)
		wantHeader(t, r, core.HeaderRetryAfter, "3600", what)
		wantNoHeader(t, r, what, core.HeaderCacheControl)
		wantHeader(t, r, core.HeaderPolicy, policy("rd", 1, 3600), what)
		wantHeader(t, r, core.HeaderRateLimit, limit("rd", 0, 3600), what)
		if n := hits.n.Load() - before; n != 1 {
			t.Errorf("handler ran %d times for one allowed and one denied request", n)
		}
		r = c.do(http.MethodPost, "/bogus", ClientHeader, id)
		wantStatus(t, r, http.StatusTooManyRequests, "denial rendered with status 200")
		if r.Body != "nope" {
			t.Errorf("denial rendered with status 200: body %q, want %q", r.Body, "nope")
		}
	})
}

// Panic checks a handler that panics after the layer allowed the request:
// the router's recovery answers 500, the charge stays (the request was
// admitted; the suite does not refund work that started), no per-request
// state leaks into later requests on the connection, no goroutine is left
// behind, and the server keeps serving.
func Panic(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "p", Algorithm: core.TokenBucket, Quota: 50, Window: time.Hour, Key: byClient},
		core.Budget{Name: "q", Algorithm: core.TokenBucket, Quota: 50, Window: time.Hour, Key: byClient},
	)
	lp := layer(t, eng, core.Use("p"))
	var panics counter
	boom := Route{Method: http.MethodPost, Path: "/panic", Layers: []*core.Layer{lp}, Handle: func() string {
		panics.n.Add(1)
		panic("limittest: handler panic")
	}}
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/ok", nil, lp),
		boom,
		route(http.MethodPost, "/other", nil, layer(t, eng, core.Use("q"))),
	}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()

	r := c.do(http.MethodPost, "/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/ok")
	wantLimits(t, r, "/ok", "p", 49)
	r = c.do(http.MethodPost, "/panic", ClientHeader, id)
	wantStatus(t, r, http.StatusInternalServerError, "/panic")
	r = c.do(http.MethodPost, "/other", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/other after a panic")
	wantLimits(t, r, "/other after a panic", "q", 49) // nothing of the panicked request
	r = c.do(http.MethodPost, "/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/ok after a panic")
	wantLimits(t, r, "/ok after a panic", "p", 47) // the panicked request's charge stayed

	const more = 20
	g0 := runtime.NumGoroutine()
	for i := 0; i < more; i++ {
		r = c.do(http.MethodPost, "/panic", ClientHeader, id)
		wantStatus(t, r, http.StatusInternalServerError, "/panic again")
	}
	r = c.do(http.MethodPost, "/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/ok after more panics")
	wantLimits(t, r, "/ok after more panics", "p", 47-more-1)
	if n := panics.n.Load(); n != more+1 {
		t.Errorf("panicking handler ran %d times, want %d", n, more+1)
	}
	deadline := time.Now().Add(5 * time.Second)
	g1 := runtime.NumGoroutine()
	for g1 > g0+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		g1 = runtime.NumGoroutine()
	}
	if g1 > g0+2 {
		t.Errorf("%d goroutines after %d panics, %d before: something is left behind per panic", g1, more, g0)
	}
}

// StructuredFields checks the IETF fields with an independent RFC 9651
// parser (github.com/dunglas/httpsfv): lists of sf-string items, one per
// budget in layer order, with integer q, w, r and t parameters; a budget
// name with a quote and a backslash survives the round trip.
func StructuredFields(t *testing.T, cfg Config) {
	const odd = `we"ird\name`
	eng := engine(t, cfg,
		core.Budget{Name: "sf.a", Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Key: byClient},
		core.Budget{Name: odd, Algorithm: core.SlidingLog, Quota: 7, Window: 90 * time.Second, Key: byClient},
	)
	app := App{Groups: []Group{{Routes: []Route{route(http.MethodPost, "/sf", nil, layer(t, eng, core.Use("sf.a", odd)))}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	for i := 1; i <= 6; i++ {
		what := fmt.Sprintf("request %d", i)
		r := c.do(http.MethodPost, "/sf", ClientHeader, id)
		pol := members(t, r, core.HeaderPolicy, []string{"q", "w"})
		if !slices.Equal(names(pol), []string{"sf.a", odd}) {
			t.Fatalf("%s: RateLimit-Policy names %q, want [sf.a %s] (field %q)", what, names(pol), odd, r.Header.Values(core.HeaderPolicy))
		}
		if p := pol[0].params; p["q"] != 5 || p["w"] != 60 {
			t.Errorf("%s: sf.a policy %v, want q=5 w=60", what, p)
		}
		if p := pol[1].params; p["q"] != 7 || p["w"] != 90 {
			t.Errorf("%s: %s policy %v, want q=7 w=90", what, odd, p)
		}
		lim := members(t, r, core.HeaderRateLimit, []string{"r", "t"})
		if !slices.Equal(names(lim), []string{"sf.a", odd}) {
			t.Fatalf("%s: RateLimit names %q, want [sf.a %s]", what, names(lim), odd)
		}
		a, b := lim[0].params, lim[1].params
		if i <= 5 {
			wantStatus(t, r, http.StatusOK, what)
			if a["r"] != int64(5-i) || b["r"] != int64(7-i) || a["t"] < 1 || b["t"] < 1 {
				t.Errorf("%s: RateLimit %v %v, want r=%d and r=%d with t >= 1", what, a, b, 5-i, 7-i)
			}
			continue
		}
		wantStatus(t, r, http.StatusTooManyRequests, what)
		ra, err := strconv.ParseInt(header(t, r, core.HeaderRetryAfter), 10, 64)
		if err != nil || ra < 1 || ra < a["t"] {
			t.Errorf("%s: Retry-After %q, want whole seconds >= 1 and >= t=%d", what, header(t, r, core.HeaderRetryAfter), a["t"])
		}
		if a["r"] != 0 || b["r"] != 2 {
			t.Errorf("%s: RateLimit %v %v, want r=0 and r=2 (not charged)", what, a, b)
		}
	}
}

// Golden checks exact bytes: the same sequence gives every adapter the
// same statuses, the same rate-limit field values and the same denial
// body, which are the values below.
func Golden(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "golden", Algorithm: core.TokenBucket, Quota: 3, Window: time.Minute, Key: byClient},
	)
	l := layer(t, eng, core.Use("golden"))
	app := App{Groups: []Group{{Routes: []Route{route(http.MethodPost, "/golden", nil, l)}}}}
	c := newClient(t, cfg.Serve(t, app))

	// The default denial for this decision, rendered by core; the body is
	// also checked field by field below.
	den := core.DefaultDeny(&core.Request{}, &core.Decision{Reason: core.ReasonRateLimited, DeniedBy: "golden", RetryAfter: 20 * time.Second})
	const pol = `"golden";q=3;w=60`
	want := []struct {
		status                  int
		rateLimit, retry, cache string
		contentType, body       string
	}{
		{200, `"golden";r=2;t=20`, "", "", "text/plain; charset=utf-8", "ok"},
		{200, `"golden";r=1;t=40`, "", "", "text/plain; charset=utf-8", "ok"},
		{200, `"golden";r=0;t=60`, "", "", "text/plain; charset=utf-8", "ok"},
		{429, `"golden";r=0;t=20`, "20", "no-store", "application/problem+json", string(den.Body)},
	}
	oneSecond(t, func(t reporter, id string) {
		for i, w := range want {
			what := fmt.Sprintf("request %d", i+1)
			r := c.do(http.MethodPost, "/golden", ClientHeader, id)
			wantStatus(t, r, w.status, what)
			wantHeader(t, r, core.HeaderPolicy, pol, what)
			wantHeader(t, r, core.HeaderRateLimit, w.rateLimit, what)
			wantHeader(t, r, core.HeaderRetryAfter, w.retry, what)
			wantHeader(t, r, core.HeaderCacheControl, w.cache, what)
			wantHeader(t, r, core.HeaderContentType, w.contentType, what)
			wantNoHeader(t, r, what, exceptFields(core.HeaderPolicy, core.HeaderRateLimit)...)
			if r.Body != w.body {
				t.Errorf("%s: body %q, want %q", what, r.Body, w.body)
			}
			if w.status == http.StatusTooManyRequests {
				wantProblem(t, r, http.StatusTooManyRequests, core.ProblemQuotaExceeded, "golden", 20, what)
			}
		}
	})
}

// Shaping checks a leaky bucket: requests that would be denied wait for
// their slot (within MaxWait) instead, so three back-to-back requests
// spaced 100ms apart take at least 200ms; a slot beyond MaxWait is
// denied with a Retry-After that discounts MaxWait.
func Shaping(t *testing.T, cfg Config) {
	const interval = 100 * time.Millisecond
	eng := engine(t, cfg,
		core.Budget{Name: "shape", Algorithm: core.LeakyBucket, Quota: 10, Window: time.Second, MaxWait: time.Second, Key: byClient},
		core.Budget{Name: "slow", Algorithm: core.LeakyBucket, Quota: 1, Window: 10 * time.Second, MaxWait: time.Second, Key: byClient},
	)
	var hits counter
	app := App{Groups: []Group{{Routes: []Route{
		route(http.MethodPost, "/shape", &hits, layer(t, eng, core.Use("shape"))),
		route(http.MethodPost, "/slow", nil, layer(t, eng, core.Use("slow"))),
	}}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	start := time.Now()
	for i := 1; i <= 3; i++ {
		r := c.do(http.MethodPost, "/shape", ClientHeader, id)
		wantStatus(t, r, http.StatusOK, fmt.Sprintf("/shape %d", i))
	}
	// The third request's slot is two intervals after the first's; the
	// margin covers a store clock read at microsecond granularity.
	if took := time.Since(start); took < 2*interval-2*time.Millisecond {
		t.Errorf("three shaped requests took %v, want at least %v", took, 2*interval)
	}
	if n := hits.n.Load(); n != 3 {
		t.Errorf("/shape handler ran %d times, want 3", n)
	}
	oneSecond(t, func(t reporter, id string) {
		wantStatus(t, c.do(http.MethodPost, "/slow", ClientHeader, id), http.StatusOK, "/slow 1")
		r := c.do(http.MethodPost, "/slow", ClientHeader, id)
		wantStatus(t, r, http.StatusTooManyRequests, "/slow 2, its slot 10s away")
		wantHeader(t, r, core.HeaderRetryAfter, "9", "/slow 2")
	})
}

// RefundedReset checks the t an inner denial reports for an outer budget
// whose charge it refunded: the state after the refund, so the same t as
// before the refunded request.
func RefundedReset(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "ro", Algorithm: core.TokenBucket, Quota: 6, Window: time.Minute, Key: byClient},
		core.Budget{Name: "ri", Algorithm: core.TokenBucket, Quota: 2, Window: time.Minute, Key: byClient},
	)
	app := App{Groups: []Group{{
		Prefix: "/ro",
		Layers: []*core.Layer{layer(t, eng, core.Use("ro"))},
		Routes: []Route{
			route(http.MethodPost, "/w", nil, layer(t, eng, core.Use("ri"))),
			route(http.MethodGet, "/r", nil),
		},
	}}}
	c := newClient(t, cfg.Serve(t, app))
	oneSecond(t, func(t reporter, id string) {
		want := []struct {
			method, path string
			status       int
			rateLimit    string
		}{
			{http.MethodPost, "/ro/w", 200, limit("ro", 5, 10) + ", " + limit("ri", 1, 30)},
			{http.MethodPost, "/ro/w", 200, limit("ro", 4, 20) + ", " + limit("ri", 0, 60)},
			{http.MethodPost, "/ro/w", 429, limit("ro", 4, 20) + ", " + limit("ri", 0, 30)},
			{http.MethodGet, "/ro/r", 200, limit("ro", 3, 30)},
		}
		for i, w := range want {
			what := fmt.Sprintf("request %d", i+1)
			r := c.do(w.method, w.path, ClientHeader, id)
			wantStatus(t, r, w.status, what)
			wantHeader(t, r, core.HeaderRateLimit, w.rateLimit, what)
		}
	})
}

// MixedStyles checks an inner layer whose header style differs from the
// outer layer's: the response carries the inner layer's fields only, for
// every budget of the request, and none of the outer style's.
func MixedStyles(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "mo", Quota: 10, Window: time.Hour, Key: byClient},
		core.Budget{Name: "mi", Quota: 3, Window: time.Hour, Key: byClient},
	)
	var n counter
	app := App{Groups: []Group{{
		Prefix: "/mixed",
		Layers: []*core.Layer{layer(t, eng, core.Use("mo"))},
		Routes: []Route{route(http.MethodPost, "/x", &n, layer(t, eng, core.Use("mi"), core.Headers(core.HeadersX)))},
	}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()
	r := c.do(http.MethodPost, "/mixed/x", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "/mixed/x")
	wantNoHeader(t, r, "/mixed/x", core.HeaderPolicy, core.HeaderRateLimit)
	// X style reports the budget closest to exhaustion of both layers.
	wantHeader(t, r, core.HeaderXLimit, "3", "/mixed/x")
	wantHeader(t, r, core.HeaderXRemaining, "2", "/mixed/x")
}
