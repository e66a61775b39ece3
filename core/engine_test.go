package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func TestConcurrentHotKeyAdmitsExactlyQuota(t *testing.T) {
	e, _ := newEngine(t, core.NewSystemClock(), core.Budget{Name: "hour", Quota: 1000, Window: time.Hour, Key: remoteAddrKey})
	l := e.MustLayer(core.Use("hour"))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := request("POST", "203.0.113.7")
			for i := 0; i < 50; i++ {
				var d core.Decision
				l.Decide(r, &d)
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 1000 {
		t.Fatalf("admitted %d of 3200, want exactly 1000", n)
	}
}

func TestConcurrentMultiBudgetAllOrNothing(t *testing.T) {
	// Two budgets on different keys (likely different shards) in one
	// layer: no admitted request may exceed either budget, and every
	// admitted request spends both.
	e, _ := newEngine(t, core.NewSystemClock(),
		core.Budget{Name: "a", Quota: 300, Window: time.Hour, Key: remoteAddrKey},
		core.Budget{Name: "b", Quota: 200, Window: time.Hour, Key: func(*core.Request) (string, error) { return "global", nil }},
	)
	l := e.MustLayer(core.Use("a", "b"))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if d := decide(l, request("POST", "10.0.0.1")); d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 200 {
		t.Fatalf("admitted %d, want 200 (budget b)", n)
	}
	d := decide(l, request("POST", "10.0.0.1"))
	if a := result(t, d, "a"); a.Remaining != 100 {
		t.Fatalf("budget a remaining %d after 200 admitted, want 100", a.Remaining)
	}
}

func TestAllOrNothingWithinLayer(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "a", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "b", Quota: 1, Window: time.Minute, Key: remoteAddrKey},
	)
	l := e.MustLayer(core.Use("a", "b"))
	if d := decide(l, request("POST", "1.2.3.4")); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	d := decide(l, request("POST", "1.2.3.4"))
	if d.Allowed || d.Reason != core.ReasonRateLimited || d.DeniedBy != "b" {
		t.Fatalf("second: %+v", d)
	}
	if a := result(t, d, "a"); a.Charged || a.Remaining != 9 {
		t.Fatalf("budget a was charged by a denied request: %+v", a)
	}
	// A layer with only a shows a's count unchanged.
	la := e.MustLayer(core.Use("a"))
	if a := result(t, decide(la, request("POST", "1.2.3.4")), "a"); a.Remaining != 8 {
		t.Fatalf("a remaining %d, want 8", a.Remaining)
	}
}

func TestStackedLayersRefundOuter(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "outer", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "inner", Quota: 1, Window: time.Minute, Key: remoteAddrKey},
	)
	outer, inner := e.MustLayer(core.Use("outer")), e.MustLayer(core.Use("inner"))
	r := request("POST", "1.2.3.4")
	var d core.Decision
	outer.Decide(r, &d)
	inner.Decide(r, &d)
	if !d.Allowed || len(d.Results) != 2 {
		t.Fatalf("first: %+v", d)
	}
	d.Reset()
	outer.Decide(r, &d)
	if !d.Allowed || result(t, &d, "outer").Remaining != 8 {
		t.Fatalf("outer on second request: %+v", d)
	}
	inner.Decide(r, &d)
	if d.Allowed || d.DeniedBy != "inner" {
		t.Fatalf("inner on second request: %+v", d)
	}
	o := result(t, &d, "outer")
	if !o.Refunded || o.Charged || o.Remaining != 9 {
		t.Fatalf("outer result after inner denial: %+v", o)
	}
	d.Reset()
	outer.Decide(r, &d)
	if got := result(t, &d, "outer").Remaining; got != 8 {
		t.Fatalf("outer remaining %d after refund, want 8", got)
	}
}

func TestIgnoredMethodIsNotEvaluated(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "all", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "writes", Quota: 1, Window: time.Minute, Key: remoteAddrKey, IgnoreMethods: []string{"GET", "HEAD", "OPTIONS"}},
	)
	l := e.MustLayer(core.Use("all", "writes"))
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "GET"} {
		d := decide(l, request(m, "1.2.3.4"))
		if !d.Allowed || len(d.Results) != 1 || d.Results[0].Budget != "all" {
			t.Fatalf("%s: %+v", m, d.Results)
		}
		f := l.Fields(d)
		if strings.Contains(f.Get(core.HeaderPolicy), "writes") || strings.Contains(f.Get(core.HeaderRateLimit), "writes") {
			t.Fatalf("%s reports the ignoring budget: %q %q", m, f.Get(core.HeaderPolicy), f.Get(core.HeaderRateLimit))
		}
	}
	if d := decide(l, request("POST", "1.2.3.4")); !d.Allowed || result(t, d, "writes").Remaining != 0 {
		t.Fatalf("first POST: %+v", d)
	}
}

func TestMissingKeyActions(t *testing.T) {
	noKey := func(*core.Request) (string, error) { return "", fmt.Errorf("no tenant: %w", core.ErrNoKey) }
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "deny", Quota: 5, Window: time.Minute, Key: noKey},
		core.Budget{Name: "skip", Quota: 5, Window: time.Minute, Key: noKey, MissingKey: core.MissingKeySkip},
		core.Budget{Name: "fallback", Quota: 5, Window: time.Minute, Key: noKey, MissingKey: core.MissingKeyFallback, FallbackKey: remoteAddrKey},
		core.Budget{Name: "other", Quota: 5, Window: time.Minute, Key: remoteAddrKey},
	)
	d := decide(e.MustLayer(core.Use("other", "deny")), request("GET", "1.2.3.4"))
	if d.Allowed || d.Reason != core.ReasonNoKey || d.DeniedBy != "deny" || !errors.Is(d.Err, core.ErrNoKey) {
		t.Fatalf("deny: %+v", d)
	}
	// A key that is not a credential: 400 (a 401 must carry a challenge).
	if den := e.MustLayer(core.Use("deny")).Deny(request("GET", "x"), d); den.Status != 400 || den.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("no-key status %d, WWW-Authenticate %q", den.Status, den.Header.Get("WWW-Authenticate"))
	}
	// A missing credential: 401 with the key function's challenge.
	cred := *d
	cred.Err = &core.MissingCredentialError{Challenge: "Bearer", Msg: "no token"}
	den := e.MustLayer(core.Use("deny")).Deny(request("GET", "x"), &cred)
	if den.Status != 401 || den.Header.Get("WWW-Authenticate") != "Bearer" || !strings.Contains(string(den.Body), "no credential") {
		t.Fatalf("missing credential: %d, WWW-Authenticate %q, %s", den.Status, den.Header.Get("WWW-Authenticate"), den.Body)
	}
	// An ambiguous credential is not reported as a missing one.
	bad := *d
	bad.Err = errors.New("two Authorization lines")
	den = e.MustLayer(core.Use("deny")).Deny(request("GET", "x"), &bad)
	if den.Status != 400 || !strings.Contains(string(den.Body), "ambiguous or malformed") {
		t.Fatalf("ambiguous credential: %d, %s", den.Status, den.Body)
	}
	// Nothing was charged for the denied request.
	if r := result(t, decide(e.MustLayer(core.Use("other")), request("GET", "1.2.3.4")), "other"); r.Remaining != 4 {
		t.Fatalf("other remaining %d, want 4", r.Remaining)
	}
	d = decide(e.MustLayer(core.Use("skip", "other")), request("GET", "1.2.3.4"))
	if !d.Allowed || len(d.Results) != 1 {
		t.Fatalf("skip: %+v", d)
	}
	d = decide(e.MustLayer(core.Use("fallback")), request("GET", "1.2.3.4"))
	if !d.Allowed || !strings.HasSuffix(d.Results[0].Key, "1.2.3.4") || d.Results[0].Key == "1.2.3.4" {
		t.Fatalf("fallback: %+v", d)
	}
}

func TestCostWeights(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "a", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "b", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
	)
	l := e.MustLayer(core.Use("a", "b"), core.Cost(2), core.CostIn("b", 5))
	d := decide(l, request("POST", "k"))
	if result(t, d, "a").Remaining != 8 || result(t, d, "b").Remaining != 5 {
		t.Fatalf("%+v", d.Results)
	}
	// A computed cost above what a budget can hold is a clear denial.
	big := e.MustLayer(core.Use("a"), core.CostFrom(func(*core.Request) (int64, error) { return 11, nil }))
	d = decide(big, request("POST", "k"))
	if d.Allowed || d.Reason != core.ReasonCostTooHigh {
		t.Fatalf("cost 11 of 10: %+v", d)
	}
	if den := big.Deny(request("POST", "k"), d); den.Status != 429 || den.Header.Get("Retry-After") != "" {
		t.Fatalf("cost-too-high denial: %d %v", den.Status, den.Header)
	}
	bad := e.MustLayer(core.Use("a"), core.CostFrom(func(*core.Request) (int64, error) { return 0, errors.New("bad body") }))
	if d := decide(bad, request("POST", "k")); d.Allowed || d.Reason != core.ReasonBadCost {
		t.Fatalf("failing cost func: %+v", d)
	}
}

func TestConfigurationErrors(t *testing.T) {
	k := remoteAddrKey
	s := newStore(t, newFakeClock(t0))
	cases := []struct {
		name    string
		budgets []core.Budget
		want    []string
	}{
		{"non-positive quota", []core.Budget{{Name: "q", Quota: 0, Window: time.Minute, Key: k}}, []string{`budget "q": quota 0 is not positive`}},
		{"non-positive window", []core.Budget{{Name: "w", Quota: 1, Window: -time.Second, Key: k}}, []string{`budget "w": window -1s is not positive`}},
		{"sub-millisecond window", []core.Budget{{Name: "w", Quota: 1, Window: 1500 * time.Microsecond, Key: k}}, []string{`budget "w": window 1.5ms is not a whole number of milliseconds`}},
		{"duplicate", []core.Budget{{Name: "d", Quota: 1, Window: time.Minute, Key: k}, {Name: "d", Quota: 2, Window: time.Minute, Key: k}}, []string{`budget "d": defined more than once`}},
		{"no key", []core.Budget{{Name: "n", Quota: 1, Window: time.Minute}}, []string{`budget "n": no key function`}},
		{"bad name", []core.Budget{{Name: "é", Quota: 1, Window: time.Minute, Key: k}}, []string{`name contains byte 0xc3`}},
		{"burst on window", []core.Budget{{Name: "b", Quota: 1, Window: time.Minute, Burst: 3, Key: k}}, []string{`budget "b": burst applies to token_bucket and leaky_bucket only, not fixed_window`}},
		{"leaky without wait", []core.Budget{{Name: "l", Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, Key: k}}, []string{`budget "l": a leaky_bucket needs a positive max_wait`}},
		{"lower-case method", []core.Budget{{Name: "m", Quota: 1, Window: time.Minute, Key: k, IgnoreMethods: []string{"GET", "head"}}}, []string{`budget "m": methods are case-sensitive: "head" never matches; write "HEAD"`}},
		{"method twice", []core.Budget{{Name: "m", Quota: 1, Window: time.Minute, Key: k, IgnoreMethods: []string{"GET", "GET"}}}, []string{`budget "m": method "GET" is listed twice`}},
		{"not a method", []core.Budget{{Name: "m", Quota: 1, Window: time.Minute, Key: k, IgnoreMethods: []string{"GET HEAD"}}}, []string{`budget "m": "GET HEAD" is not a method name`}},
		{"fallback without key", []core.Budget{{Name: "f", Quota: 1, Window: time.Minute, Key: k, MissingKey: core.MissingKeyFallback}}, []string{`budget "f": missing_key is fallback but no fallback_key is set`}},
		{"fail-local without fallback store", []core.Budget{{Name: "fl", Quota: 1, Window: time.Minute, Key: k, FailureMode: core.FailLocal}}, []string{`budget "fl": fail-local needs a fallback store`}},
		{"too fast bucket", []core.Budget{{Name: "t", Algorithm: core.TokenBucket, Quota: 2000, Window: time.Millisecond, Key: k}}, []string{`budget "t": quota 2000 per 1ms is more than one unit per microsecond`}},
		{"huge sliding log", []core.Budget{{Name: "g", Algorithm: core.SlidingLog, Quota: 1_000_000, Window: time.Hour, Key: k}}, []string{`budget "g": quota 1000000 exceeds 100000`}},
		{"several at once", []core.Budget{{Name: "x", Window: time.Minute}, {Name: "y", Quota: 1, Key: k}}, []string{`budget "x": quota 0 is not positive`, `budget "x": no key function`, `budget "y": window 0s is not positive`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := core.New(core.Config{Store: s, Budgets: tc.budgets})
			var ce *core.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := core.New(core.Config{Budgets: []core.Budget{{Name: "a", Quota: 1, Window: time.Minute, Key: k}}}); err == nil || !strings.Contains(err.Error(), "no store") {
		t.Fatalf("missing store: %v", err)
	}
}

func TestLayerConfigurationErrors(t *testing.T) {
	e, _ := newEngine(t, newFakeClock(t0),
		core.Budget{Name: "a", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "bucket", Algorithm: core.TokenBucket, Quota: 100, Burst: 5, Window: time.Minute, Key: remoteAddrKey},
	)
	cases := []struct {
		name string
		opts []core.LayerOption
		want []string
	}{
		{"unknown budget", []core.LayerOption{core.Use("a", "nope")}, []string{`layer: unknown budget "nope"`}},
		{"no budgets", nil, []string{"layer: no budgets"}},
		{"duplicate", []core.LayerOption{core.Use("a", "a")}, []string{`layer: budget "a" is listed twice`}},
		{"cost above quota", []core.LayerOption{core.Use("a"), core.Cost(11)}, []string{`budget "a": cost 11 exceeds what the budget can ever hold (10)`}},
		{"cost above burst", []core.LayerOption{core.Use("bucket"), core.CostIn("bucket", 6)}, []string{`budget "bucket": cost 6 exceeds what the budget can ever hold (5)`}},
		{"negative cost", []core.LayerOption{core.Use("a"), core.Cost(-1)}, []string{`budget "a": cost -1 is negative`}},
		{"cost for unused budget", []core.LayerOption{core.Use("a"), core.CostIn("bucket", 1)}, []string{`cost set for budget "bucket", which the layer does not use`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Layer(tc.opts...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// flakyStore fails while down is set; otherwise it delegates.
type flakyStore struct {
	core.Store
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = errors.New("store down")

func (f *flakyStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Store.Take(ctx, items, out)
}

// Peek reads through to the wrapped store, which must be a core.Peeker;
// it fails while down is set.
func (f *flakyStore) Peek(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.(core.Peeker).Peek(ctx, items, out)
}

type recordingObserver struct {
	mu        sync.Mutex
	errs      []error
	decisions int
}

func (o *recordingObserver) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {
	o.mu.Lock()
	o.decisions++
	o.mu.Unlock()
}

func (o *recordingObserver) ObserveError(_ core.ErrorKind, _ string, err error) {
	o.mu.Lock()
	o.errs = append(o.errs, err)
	o.mu.Unlock()
}

func TestFailureModes(t *testing.T) {
	c := newFakeClock(t0)
	fs := &flakyStore{Store: newStore(t, c)}
	fallback := newStore(t, c)
	obs := &recordingObserver{}
	e, err := core.New(core.Config{
		Store: fs, Fallback: fallback, Clock: c, Observer: obs, BreakerThreshold: 2, BreakerCooldown: 2 * time.Second,
		Budgets: []core.Budget{
			{Name: "open", Quota: 1, Window: time.Minute, Key: remoteAddrKey},
			{Name: "closed", Quota: 1, Window: time.Minute, Key: remoteAddrKey, FailureMode: core.FailClosed},
			{Name: "local", Quota: 2, Window: time.Minute, Key: remoteAddrKey, FailureMode: core.FailLocal},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	open, closed, local := e.MustLayer(core.Use("open")), e.MustLayer(core.Use("closed")), e.MustLayer(core.Use("local"))
	fs.down.Store(true)

	d := decide(open, request("GET", "k"))
	if !d.Allowed || !d.Results[0].FailedOpen || !errors.Is(d.Err, errDown) {
		t.Fatalf("fail-open: %+v", d)
	}
	if f := open.Fields(d); f.Len() != 1 || f.Get(core.HeaderPolicy) != `"open";q=1;w=60` || f.Get(core.HeaderRateLimit) != "" {
		t.Fatalf("a failed-open budget: policy %q, RateLimit %q; want the policy only", f.Get(core.HeaderPolicy), f.Get(core.HeaderRateLimit))
	}
	d = decide(closed, request("GET", "k"))
	if d.Allowed || d.Reason != core.ReasonUnavailable {
		t.Fatalf("fail-closed: %+v", d)
	}
	if den := closed.Deny(request("GET", "k"), d); den.Status != 503 || den.Header.Get("Retry-After") == "" {
		t.Fatalf("fail-closed denial: %d %v", den.Status, den.Header)
	}
	// Two consecutive failures opened the breaker: the store is not
	// called, and fail-local counts on the fallback store.
	before := fs.calls.Load()
	for i, want := range []bool{true, true, false} {
		d = decide(local, request("GET", "k"))
		if d.Allowed != want || !d.Results[0].Local {
			t.Fatalf("fail-local request %d: %+v", i, d)
		}
	}
	if fs.calls.Load() != before || !e.BreakerOpen() {
		t.Fatalf("store called %d times while the breaker is open", fs.calls.Load()-before)
	}
	// After the cooldown one probe goes through; the store is back, so
	// the breaker closes and the main store counts again.
	fs.down.Store(false)
	c.Advance(2 * time.Second)
	if d = decide(open, request("GET", "k")); !d.Allowed || d.Results[0].FailedOpen {
		t.Fatalf("probe: %+v", d)
	}
	if e.BreakerOpen() {
		t.Fatal("breaker still open after a successful probe")
	}
	if d = decide(open, request("GET", "k")); d.Allowed {
		t.Fatalf("limiting did not resume: %+v", d)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.errs) < 3 {
		t.Fatalf("observer saw %d errors", len(obs.errs))
	}
}

func TestShadowBudgetNeverDenies(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "real", Quota: 100, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "shadow", Quota: 2, Window: time.Minute, Key: remoteAddrKey, Shadow: true},
	)
	l := e.MustLayer(core.Use("real", "shadow"))
	would := 0
	for i := 0; i < 5; i++ {
		d := decide(l, request("GET", "k"))
		if !d.Allowed {
			t.Fatalf("request %d denied by a shadow budget: %+v", i, d)
		}
		if result(t, d, "shadow").WouldDeny() {
			would++
		}
		if f := l.Fields(d); strings.Contains(f.Get(core.HeaderRateLimit), "shadow") {
			t.Fatal("shadow budget reported in headers")
		}
	}
	if would != 3 {
		t.Fatalf("would have denied %d, want 3", would)
	}
	if got := result(t, decide(l, request("GET", "k")), "real").Remaining; got != 94 {
		t.Fatalf("real remaining %d, want 94", got)
	}
}

func TestDryRunDeniesNothing(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	e := core.MustNew(core.Config{Store: s, DryRun: true, Budgets: []core.Budget{{Name: "a", Quota: 1, Window: time.Minute, Key: remoteAddrKey}}})
	l := e.MustLayer(core.Use("a"))
	for i := 0; i < 3; i++ {
		if d := decide(l, request("GET", "k")); !d.Allowed || (i > 0 && !d.Results[0].WouldDeny()) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
}

func TestQuotaFunc(t *testing.T) {
	c := newFakeClock(t0)
	var quota atomic.Int64
	quota.Store(2)
	e, _ := newEngine(t, c, core.Budget{Name: "t", Quota: 5, Window: time.Minute, Key: remoteAddrKey,
		QuotaFunc: func(*core.Request, string) (int64, error) {
			if q := quota.Load(); q > 0 {
				return q, nil
			}
			return 0, errors.New("resolver down")
		}})
	l := e.MustLayer(core.Use("t"))
	decide(l, request("GET", "k"))
	decide(l, request("GET", "k"))
	if d := decide(l, request("GET", "k")); d.Allowed {
		t.Fatal("third request passed a quota of 2")
	}
	quota.Store(4) // raised mid-window: admits more at once
	if d := decide(l, request("GET", "k")); !d.Allowed || d.Results[0].Limit.Quota != 4 || d.Results[0].Remaining != 1 {
		t.Fatalf("after raising: %+v", d.Results)
	}
	quota.Store(0) // resolver fails: the static quota (5) applies
	if d := decide(l, request("GET", "k")); !d.Allowed || d.Results[0].Limit.Quota != 5 {
		t.Fatalf("resolver failure fallback: %+v", d.Results)
	}
}

func TestReload(t *testing.T) {
	c := newFakeClock(t0)
	b := core.Budget{Name: "a", Quota: 5, Window: time.Minute, Key: remoteAddrKey}
	e, _ := newEngine(t, c, b)
	l := e.MustLayer(core.Use("a"))
	decide(l, request("GET", "k"))
	// A reload that drops a budget a layer uses is refused.
	if err := e.Reload([]core.Budget{{Name: "other", Quota: 1, Window: time.Minute, Key: remoteAddrKey}}); err == nil || !strings.Contains(err.Error(), `unknown budget "a"`) {
		t.Fatalf("reload without a: %v", err)
	}
	b.Quota = 10
	if err := e.Reload([]core.Budget{b}); err != nil {
		t.Fatal(err)
	}
	// The count carries over; the new quota applies.
	if d := decide(l, request("GET", "k")); d.Results[0].Remaining != 8 || d.Results[0].Limit.Quota != 10 {
		t.Fatalf("after reload: %+v", d.Results)
	}
}

func TestShapingWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		e := core.MustNew(core.Config{Store: s, Budgets: []core.Budget{{Name: "shape", Algorithm: core.LeakyBucket, Quota: 10, Window: time.Second, MaxWait: 300 * time.Millisecond, Key: remoteAddrKey}}})
		l := e.MustLayer(core.Use("shape"))
		start := time.Now()
		for i := 0; i < 4; i++ {
			d := decide(l, request("GET", "k"))
			if !d.Allowed {
				t.Fatalf("request %d denied", i)
			}
			if err := l.Wait(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
		// Served one every 100 ms: the fourth starts 300 ms in.
		if got := time.Since(start); got != 300*time.Millisecond {
			t.Fatalf("four shaped requests took %v, want 300ms", got)
		}
		// A wait cut short by the context refunds the slot.
		d1 := decide(l, request("GET", "k"))
		d2 := decide(l, request("GET", "k"))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := l.Wait(ctx, d2); !errors.Is(err, context.DeadlineExceeded) || d2.Allowed || d2.Reason != core.ReasonUnavailable {
			t.Fatalf("cancelled wait: %v %+v", err, d2)
		}
		_ = l.Wait(context.Background(), d1)
		d3 := decide(l, request("GET", "k"))
		if d3.Delay != 100*time.Millisecond-50*time.Millisecond {
			// d1's slot was kept, d2's refunded: d3 takes d2's place.
			t.Fatalf("delay after refund %v", d3.Delay)
		}
	})
}

func TestShadowBudgetWithoutKeyOrCostDoesNotDeny(t *testing.T) {
	noKey := func(*core.Request) (string, error) { return "", core.ErrNoKey }
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "keyless", Quota: 5, Window: time.Minute, Key: noKey, Shadow: true},
		core.Budget{Name: "small", Quota: 2, Window: time.Minute, Key: remoteAddrKey, Shadow: true},
		core.Budget{Name: "real", Quota: 5, Window: time.Minute, Key: remoteAddrKey},
	)
	l := e.MustLayer(core.Use("keyless", "small", "real"), core.CostFromIn("small", func(*core.Request) (int64, error) { return 3, nil }))
	d := decide(l, request("GET", "k"))
	if !d.Allowed || len(d.Results) != 1 || d.Results[0].Budget != "real" {
		t.Fatalf("shadow budgets that cannot key or cost the request denied it: %+v", d)
	}
}

func TestBreakerCallbackAndUnavailableFlag(t *testing.T) {
	c := newFakeClock(t0)
	fs := &flakyStore{Store: newStore(t, c)}
	var changes []bool
	e := core.MustNew(core.Config{
		Store: fs, Clock: c, BreakerThreshold: 1, BreakerCooldown: time.Second,
		OnBreaker: func(open bool) { changes = append(changes, open) },
		Budgets: []core.Budget{
			{Name: "closed", Quota: 1, Window: time.Minute, Key: remoteAddrKey, FailureMode: core.FailClosed},
			{Name: "shadow", Quota: 1, Window: time.Minute, Key: remoteAddrKey, Shadow: true},
		},
	})
	l := e.MustLayer(core.Use("closed", "shadow"))
	fs.down.Store(true)
	d := decide(l, request("GET", "k"))
	if d.Allowed || d.Reason != core.ReasonUnavailable {
		t.Fatalf("%+v", d)
	}
	for _, r := range d.Results {
		if !r.Unavailable {
			t.Fatalf("%s not marked unavailable", r.Budget)
		}
		if r.WouldDeny() {
			t.Fatalf("%s reports would-deny though it was never evaluated", r.Budget)
		}
	}
	fs.down.Store(false)
	c.Advance(time.Second)
	decide(l, request("GET", "k"))
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Fatalf("breaker changes %v, want [true false]", changes)
	}
}

func TestRefundAcrossEnginesAndBucketReset(t *testing.T) {
	c := newFakeClock(t0)
	outerEng, outerStore := newEngine(t, c, core.Budget{Name: "outer", Algorithm: core.TokenBucket, Quota: 6, Window: time.Minute, Key: remoteAddrKey})
	innerEng, _ := newEngine(t, c, core.Budget{Name: "inner", Quota: 1, Window: time.Minute, Key: remoteAddrKey})
	outer, inner := outerEng.MustLayer(core.Use("outer")), innerEng.MustLayer(core.Use("inner"))
	r := request("POST", "k")
	var d core.Decision
	outer.Decide(r, &d)
	inner.Decide(r, &d) // spends inner's only unit
	d.Reset()
	outer.Decide(r, &d)
	inner.Decide(r, &d)
	if d.Allowed {
		t.Fatal("second request allowed")
	}
	o := result(t, &d, "outer")
	// Refunded: one unit spent (10 s to refill), 5 left.
	if !o.Refunded || o.Remaining != 5 || o.Reset != 10*time.Second {
		t.Fatalf("refunded outer: remaining %d reset %v", o.Remaining, o.Reset)
	}
	// The refund reached the outer engine's own store.
	out := make([]core.Outcome, 1)
	if err := outerStore.Take(context.Background(), []core.Item{{Budget: "outer", Key: "k", Limit: o.Limit}}, out); err != nil || out[0].Remaining != 5 {
		t.Fatalf("outer store remaining %d after the refund, want 5 (%v)", out[0].Remaining, err)
	}
}

func TestShadowShapingDoesNotDelay(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c, core.Budget{Name: "shape", Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, MaxWait: 5 * time.Second, Key: remoteAddrKey, Shadow: true})
	l := e.MustLayer(core.Use("shape"))
	decide(l, request("GET", "k"))
	if d := decide(l, request("GET", "k")); !d.Allowed || d.Delay != 0 {
		t.Fatalf("a shadow leaky bucket delayed a request: %+v", d)
	}
}

func TestUnavailableBudgetsNotReportedAsExhausted(t *testing.T) {
	c := newFakeClock(t0)
	fs := &flakyStore{Store: newStore(t, c)}
	e := core.MustNew(core.Config{Store: fs, Clock: c, Budgets: []core.Budget{
		{Name: "open", Quota: 5, Window: time.Minute, Key: remoteAddrKey},
		{Name: "closed", Quota: 5, Window: time.Minute, Key: remoteAddrKey, FailureMode: core.FailClosed},
	}})
	l := e.MustLayer(core.Use("open", "closed"))
	fs.down.Store(true)
	d := decide(l, request("GET", "k"))
	f := l.Fields(d)
	if d.Reason != core.ReasonUnavailable || f.Get(core.HeaderRateLimit) != "" || f.Get(core.HeaderPolicy) == "" {
		t.Fatalf("reason %v, RateLimit %q, policy %q", d.Reason, f.Get(core.HeaderRateLimit), f.Get(core.HeaderPolicy))
	}
}

func TestMalformedKeyIsDeniedNotFallenBack(t *testing.T) {
	malformed := func(*core.Request) (string, error) { return "", errors.New("two credentials") }
	c := newFakeClock(t0)
	e, _ := newEngine(t, c,
		core.Budget{Name: "fb", Quota: 5, Window: time.Minute, Key: malformed, MissingKey: core.MissingKeyFallback, FallbackKey: remoteAddrKey},
		core.Budget{Name: "skip", Quota: 5, Window: time.Minute, Key: malformed, MissingKey: core.MissingKeySkip},
	)
	for _, name := range []string{"fb", "skip"} {
		if d := decide(e.MustLayer(core.Use(name)), request("GET", "k")); d.Allowed || d.Reason != core.ReasonNoKey {
			t.Fatalf("%s: a malformed key was not denied: %+v", name, d)
		}
	}
}

// Under concurrent failures and recoveries, breaker callbacks alternate,
// start with an opening and end with the breaker's final state.
func TestBreakerCallbacksAlternateUnderConcurrency(t *testing.T) {
	fs := &flakyStore{Store: newStore(t, nil)}
	var changes []bool // appended by serialised callbacks only
	e := core.MustNew(core.Config{
		Store: fs, BreakerThreshold: 1, BreakerCooldown: time.Millisecond,
		OnBreaker: func(open bool) { changes = append(changes, open) },
		Budgets:   []core.Budget{{Name: "b", Quota: 1e9, Window: time.Hour, Key: remoteAddrKey}},
	})
	l := e.MustLayer(core.Use("b"))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				if i%7 == g%3 {
					fs.down.Store(!fs.down.Load())
				}
				decide(l, request("GET", "k"))
			}
		}()
	}
	wg.Wait()
	fs.down.Store(false)
	time.Sleep(2 * time.Millisecond) // past the cooldown: the next call probes
	decide(l, request("GET", "k"))
	if e.BreakerOpen() {
		t.Fatal("breaker still open after a successful probe")
	}
	for i, open := range changes {
		if open != (i%2 == 0) {
			t.Fatalf("callback %d said open=%v; sequence %v does not alternate from true", i, open, changes[:i+1])
		}
	}
	if len(changes) == 0 || changes[len(changes)-1] {
		t.Fatalf("%d callbacks; the last must report the closed breaker", len(changes))
	}
	t.Logf("%d breaker callbacks", len(changes))
}

// core.Skip applies to a direct Decide too: the request is left allowed,
// with no result of the layer, and nothing is charged.
func TestDecideSkip(t *testing.T) {
	c := newFakeClock(t0)
	e, _ := newEngine(t, c, core.Budget{Name: "one", Quota: 1, Window: time.Minute, Key: remoteAddrKey})
	l := e.MustLayer(core.Use("one"), core.Skip(func(r *core.Request) bool { return r.Method == "OPTIONS" }))
	for i := 0; i < 3; i++ {
		if d := decide(l, request("OPTIONS", "k")); !d.Allowed || len(d.Results) != 0 {
			t.Fatalf("skipped request %d: %+v", i, d)
		}
	}
	if d := decide(l, request("GET", "k")); !d.Allowed || len(d.Results) != 1 || d.Results[0].Remaining != 0 {
		t.Fatalf("first counted request: %+v", d)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	e, _ := newEngine(t, nil,
		core.Budget{Name: "a", Quota: 1e9, Window: time.Hour, Key: remoteAddrKey},
		core.Budget{Name: "b", Quota: 1e9, Window: time.Hour, Key: remoteAddrKey, IgnoreMethods: []string{"GET"}},
	)
	l := e.MustLayer(core.Use("a", "b"))
	r := request("POST", "203.0.113.1")
	var d core.Decision
	l.Decide(r, &d)
	if n := testing.AllocsPerRun(1000, func() { d.Reset(); l.Decide(r, &d); _ = l.Fields(&d) }); n > 1 {
		t.Fatalf("%v allocations per decision and header rendering (want at most the one header string)", n)
	}
}

// TestDenialWords: one second is "1 second"; a missing credential's 401
// says where to send it and names no budget.
func TestDenialWords(t *testing.T) {
	d := &core.Decision{Reason: core.ReasonRateLimited, DeniedBy: "writes", RetryAfter: 300 * time.Millisecond}
	if got := core.DefaultDeny(nil, d).Body; !strings.Contains(string(got), "retry after 1 second.") {
		t.Errorf("one second: %s", got)
	}
	d = &core.Decision{Reason: core.ReasonNoKey, DeniedBy: "hourly",
		Err: &core.MissingCredentialError{Challenge: `APIKey header="X-API-Key"`, Where: "the X-API-Key header", Msg: "no key"}}
	den := core.DefaultDeny(nil, d)
	if body := string(den.Body); den.Status != 401 || strings.Contains(body, "hourly") || !strings.Contains(body, "send it in the X-API-Key header") {
		t.Errorf("missing credential: %d %s", den.Status, body)
	}
	if got := den.Header.Get("WWW-Authenticate"); got != `APIKey header="X-API-Key"` {
		t.Errorf("challenge %q", got)
	}
}
