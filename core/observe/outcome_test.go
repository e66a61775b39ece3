package observe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
)

func constKey(*core.Request) (string, error) { return "all", nil }

func TestClassifyAllowedDeniedShadow(t *testing.T) {
	c := newClock()
	rec := &recorder{}
	e := newEngine(t, c, engineOpts{observer: rec},
		core.Budget{Name: "a", Quota: 2, Window: time.Minute, Key: remoteAddrKey, KeyClass: "ip"},
		core.Budget{Name: "s", Quota: 1, Window: time.Minute, Key: constKey, KeyClass: "global", Shadow: true},
	)
	l := e.MustLayer(core.Use("a", "s"))
	want := [][2]observe.Verdict{
		{observe.Allowed, observe.Allowed},
		{observe.Allowed, observe.ShadowDenied},
		{observe.Denied, observe.ShadowDenied},
	}
	for i, w := range want {
		d := decide(l, request("GET", "10.0.0.1:1234"))
		if d.Allowed != (w[0] == observe.Allowed) {
			t.Fatalf("request %d: allowed %v", i+1, d.Allowed)
		}
		got := rec.decisions[i]
		if len(got.layer) != 2 {
			t.Fatalf("request %d: layer has %d results", i+1, len(got.layer))
		}
		for j := range got.layer {
			if o := observe.Classify(&got.d, &got.layer[j]); o != w[j] {
				t.Errorf("request %d budget %s: outcome %v, want %v", i+1, got.layer[j].Budget, o, w[j])
			}
		}
		if got.lat <= 0 {
			t.Errorf("request %d: store latency %v, want > 0", i+1, got.lat)
		}
	}
}

func TestDeniedBeforeStore(t *testing.T) {
	c := newClock()
	rec := &recorder{}
	e := newEngine(t, c, engineOpts{observer: rec},
		core.Budget{Name: "tenant", Quota: 5, Window: time.Minute, Key: headerKey("X-Tenant"), KeyClass: "tenant"},
	)
	cases := []struct {
		name string
		opts []core.LayerOption
		hdr  http.Header
		want observe.Verdict
	}{
		{"no key", nil, http.Header{}, observe.NoKey},
		{"bad cost", []core.LayerOption{core.CostFrom(func(*core.Request) (int64, error) { return 0, errors.New("no body") })},
			http.Header{"X-Tenant": {"t1"}}, observe.BadCost},
		{"cost too high", []core.LayerOption{core.CostFrom(func(*core.Request) (int64, error) { return 6, nil })},
			http.Header{"X-Tenant": {"t1"}}, observe.CostTooHigh},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec.decisions = nil
			l := e.MustLayer(append([]core.LayerOption{core.Use("tenant")}, tc.opts...)...)
			r := request("POST", "10.0.0.1:1")
			r.Header = tc.hdr
			d := decide(l, r)
			if d.Allowed {
				t.Fatal("allowed")
			}
			if len(rec.decisions) != 1 {
				t.Fatalf("%d observed decisions", len(rec.decisions))
			}
			got := rec.decisions[0]
			o, ok := observe.DeniedBeforeStore(&got.d, got.layer)
			if !ok || o != tc.want {
				t.Fatalf("DeniedBeforeStore = %v, %v; want %v", o, ok, tc.want)
			}
			if got.d.DeniedBy != "tenant" {
				t.Errorf("denied by %q", got.d.DeniedBy)
			}
			if got.lat != 0 {
				t.Errorf("latency %v for a decision that never called the store", got.lat)
			}
		})
	}
	// An allowed decision is not a denial before the store.
	rec.decisions = nil
	r := request("POST", "10.0.0.1:1")
	r.Header = http.Header{"X-Tenant": {"t2"}}
	decide(e.MustLayer(core.Use("tenant")), r)
	if _, ok := observe.DeniedBeforeStore(&rec.decisions[0].d, rec.decisions[0].layer); ok {
		t.Error("allowed decision reported as denied before the store")
	}
}

func TestClassifyFailureModes(t *testing.T) {
	c := newClock()
	rec := &recorder{}
	main, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	fallback, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	fs := &faultStore{Store: main}
	e, err := core.New(core.Config{
		Store: fs, Fallback: fallback, Clock: c, Observer: rec, BreakerThreshold: -1,
		Budgets: []core.Budget{
			{Name: "open", Quota: 5, Window: time.Minute, Key: constKey, FailureMode: core.FailOpen},
			{Name: "closed", Quota: 5, Window: time.Minute, Key: constKey, FailureMode: core.FailClosed},
			{Name: "shadow_closed", Quota: 5, Window: time.Minute, Key: constKey, FailureMode: core.FailClosed, Shadow: true},
			{Name: "local", Quota: 5, Window: time.Minute, Key: constKey, FailureMode: core.FailLocal},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	storeErr := errors.New("connection refused")
	fs.fail(storeErr)
	cases := []struct {
		budgets []string
		allowed bool
		want    map[string]observe.Verdict
		local   string
	}{
		{[]string{"open", "closed", "shadow_closed"}, false,
			map[string]observe.Verdict{"open": observe.FailedOpen, "closed": observe.FailedClosed, "shadow_closed": observe.FailedOpen}, ""},
		{[]string{"open", "local"}, true,
			map[string]observe.Verdict{"open": observe.FailedOpen, "local": observe.Allowed}, "local"},
		{[]string{"shadow_closed"}, true,
			map[string]observe.Verdict{"shadow_closed": observe.FailedOpen}, ""},
	}
	for _, tc := range cases {
		rec.decisions, rec.errors = nil, nil
		d := decide(e.MustLayer(core.Use(tc.budgets...)), request("GET", "10.0.0.1:1"))
		if d.Allowed != tc.allowed {
			t.Fatalf("%v: allowed %v, want %v", tc.budgets, d.Allowed, tc.allowed)
		}
		got := rec.decisions[0]
		for i := range got.layer {
			res := &got.layer[i]
			if o := observe.Classify(&got.d, res); o != tc.want[res.Budget] {
				t.Errorf("%v: %s outcome %v, want %v", tc.budgets, res.Budget, o, tc.want[res.Budget])
			}
			if res.Local != (res.Budget == tc.local) {
				t.Errorf("%v: %s local %v", tc.budgets, res.Budget, res.Local)
			}
			if observe.NearLimit(&got.d, res, 0.01) && res.Budget != "local" {
				t.Errorf("%v: %s, not evaluated, reported near the limit", tc.budgets, res.Budget)
			}
		}
		if len(rec.errors) != 1 || !errors.Is(rec.errors[0].err, storeErr) || rec.errors[0].budget != "" {
			t.Fatalf("%v: errors %v", tc.budgets, rec.errors)
		}
		if k := rec.errors[0].kind; k != core.KindStoreError {
			t.Errorf("store error classified %v", k)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	c := newClock()
	rec := &recorder{}
	ms, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	fs := &faultStore{Store: ms}
	e, err := core.New(core.Config{
		Store: fs, Clock: c, Observer: rec, BreakerThreshold: 1, BreakerCooldown: time.Minute,
		Budgets: []core.Budget{
			{Name: "skip", Quota: 5, Window: time.Minute, Key: headerKey("X-Tenant"), MissingKey: core.MissingKeySkip},
			{Name: "q", Quota: 5, Window: time.Minute, Key: constKey,
				QuotaFunc: func(*core.Request, string) (int64, error) { return 0, errors.New("plan lookup failed") }},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := e.MustLayer(core.Use("skip", "q"))
	r := request("GET", "10.0.0.1:1")
	r.Header = http.Header{}
	fs.fail(fmt.Errorf("take: %w", context.DeadlineExceeded))
	decide(l, r) // timeout; the breaker opens
	decide(l, r) // skipped by the breaker
	fs.fail(fmt.Errorf("take: %w", context.Canceled))
	c.Advance(time.Minute) // probe
	decide(l, r)
	fs.fail(fmt.Errorf("take: %w", errors.Join(core.ErrMisconfigured, errors.New("MOVED 3999 127.0.0.1:7001"))))
	c.Advance(time.Minute) // probe
	decide(l, r)
	var got []core.ErrorKind
	for _, x := range rec.errors {
		got = append(got, x.kind)
		if x.kind.IsStore() != (x.budget == "") {
			t.Errorf("%v reported with budget %q", x.kind, x.budget)
		}
		if x.kind.IsStore() && x.kind != core.ClassifyStoreError(x.err) {
			t.Errorf("%v reported for %v, which classifies as %v", x.kind, x.err, core.ClassifyStoreError(x.err))
		}
	}
	want := []core.ErrorKind{
		core.KindMissingKey, core.KindBudgetError, core.KindStoreTimeout,
		core.KindMissingKey, core.KindBudgetError, core.KindBreakerOpen,
		core.KindMissingKey, core.KindBudgetError, core.KindStoreCanceled,
		core.KindMissingKey, core.KindBudgetError, core.KindStoreMisconfigured,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("error kinds\n got %v\nwant %v", got, want)
	}
	for _, k := range want {
		if k.IsStore() != (k <= core.KindStoreMisconfigured) {
			t.Errorf("%v IsStore %v", k, k.IsStore())
		}
	}
}

func TestNearLimit(t *testing.T) {
	c := newClock()
	rec := &recorder{}
	e := newEngine(t, c, engineOpts{observer: rec},
		core.Budget{Name: "fw", Quota: 10, Window: time.Minute, Key: constKey},
		core.Budget{Name: "tb", Algorithm: core.TokenBucket, Quota: 10, Burst: 5, Window: time.Minute, Key: constKey},
		core.Budget{Name: "one", Quota: 1, Window: time.Minute, Key: constKey},
	)
	check := func(l *core.Layer, n int, ratio float64) []int {
		rec.decisions = nil
		var near []int
		for i := 1; i <= n; i++ {
			decide(l, request("GET", "10.0.0.1:1"))
			got := rec.decisions[i-1]
			if observe.NearLimit(&got.d, &got.layer[0], ratio) {
				near = append(near, i)
			}
		}
		return near
	}
	if got := check(e.MustLayer(core.Use("fw")), 12, 0.8); fmt.Sprint(got) != "[8 9 10]" {
		t.Errorf("fixed window quota 10 at 0.8: near at requests %v, want [8 9 10]", got)
	}
	if got := check(e.MustLayer(core.Use("tb")), 6, 0.8); fmt.Sprint(got) != "[4 5]" {
		t.Errorf("token bucket burst 5 at 0.8: near at requests %v, want [4 5]", got)
	}
	// A budget with room in a decision another budget denies is not near.
	c.Advance(time.Minute)
	l := e.MustLayer(core.Use("fw", "one"))
	check(l, 1, 0.05)
	rec.decisions = nil
	d := decide(l, request("GET", "10.0.0.1:1"))
	if d.Allowed {
		t.Fatal("second request allowed by a quota of 1")
	}
	got := rec.decisions[0]
	if !got.layer[0].Allowed || observe.NearLimit(&got.d, &got.layer[0], 0.05) {
		t.Errorf("fw in a denied decision: allowed %v, near %v", got.layer[0].Allowed, observe.NearLimit(&got.d, &got.layer[0], 0.05))
	}
	// Ratios out of range report nothing.
	for _, ratio := range []float64{0, -1, 1.5} {
		if observe.NearLimit(&core.Decision{Allowed: true}, &core.Result{Item: core.Item{Limit: core.Limit{Quota: 1}}, Outcome: core.Outcome{Allowed: true}}, ratio) {
			t.Errorf("ratio %v reported near", ratio)
		}
	}
}

func TestOutcomeNames(t *testing.T) {
	seen := map[string]bool{}
	for o := range observe.NumVerdicts {
		n := observe.Verdict(o).String()
		if n == "unknown" || seen[n] {
			t.Errorf("outcome %d has name %q", o, n)
		}
		seen[n] = true
	}
	if observe.Verdict(observe.NumVerdicts).String() != "unknown" {
		t.Error("out-of-range outcome has a name")
	}
	seen = map[string]bool{}
	for k := range core.NumErrorKinds {
		n := core.ErrorKind(k).String()
		if n == "unknown" || seen[n] {
			t.Errorf("error kind %d has name %q", k, n)
		}
		seen[n] = true
	}
}

type countObserver struct{ decisions, errors int }

func (c *countObserver) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {
	c.decisions++
}
func (c *countObserver) ObserveError(core.ErrorKind, string, error) { c.errors++ }

func TestMulti(t *testing.T) {
	if observe.Multi() != nil || observe.Multi(nil, nil) != nil {
		t.Fatal("Multi of nothing is not nil")
	}
	a, b, c := &countObserver{}, &countObserver{}, &countObserver{}
	if observe.Multi(nil, a) != core.Observer(a) {
		t.Fatal("Multi of one observer is not that observer")
	}
	m := observe.Multi(a, nil, observe.Multi(b, c))
	m.ObserveDecision(nil, &core.Decision{}, nil, 0)
	m.ObserveDecision(nil, &core.Decision{}, nil, 0)
	m.ObserveError(core.KindStoreError, "", errors.New("x"))
	for i, o := range []*countObserver{a, b, c} {
		if o.decisions != 2 || o.errors != 1 {
			t.Errorf("observer %d saw %d decisions and %d errors, want 2 and 1", i, o.decisions, o.errors)
		}
	}
}
