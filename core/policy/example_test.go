package policy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/policy"
	"github.com/quotagate/quotagate/keyfunc"
)

// A tier's share is exact and rounds up: a tenant at 25% gets 75 of a
// reference 300 and 2 of a reference 5.
func ExampleShare_Scale() {
	small := policy.Percent(25)
	fmt.Println(small.Scale(300), small.Scale(5), small.Scale(1))
	third, _ := policy.ParseShare("1/3")
	fmt.Println(third.Scale(300), third.Scale(301))
	// Output:
	// 75 2 1
	// 100 101
}

// A tier is derived from a licence's cap unless an operator pinned one.
func ExampleTiers_Of() {
	tiers, _ := policy.NewTiers([]policy.Tier{
		{Name: "small", Share: policy.Percent(25), UpTo: 100},
		{Name: "medium", Share: policy.Percent(50), UpTo: 1000},
		{Name: "large", Share: policy.Percent(100), UpTo: 10_000},
		{Name: "xl", Share: policy.Percent(200)},
		{Name: "max", Share: policy.Percent(400), PinnedOnly: true},
	}, "")
	for _, s := range []policy.Subject{
		{Cap: 80},
		{Cap: 5000},
		{Cap: policy.NoCap},
		{Cap: 80, Tier: "large"}, // pinned beats derived
		{Cap: 80, Tier: "max"},
	} {
		t, _ := tiers.Of(s)
		fmt.Printf("cap %d pinned %q: %s (%s)\n", s.Cap, s.Tier, t.Name, t.Share)
	}
	// Output:
	// cap 80 pinned "": small (25%)
	// cap 5000 pinned "": large (100%)
	// cap -1 pinned "": xl (200%)
	// cap 80 pinned "large": large (100%)
	// cap 80 pinned "max": max (400%)
}

// Plans add to a base quota; an override replaces both. The application
// says which plan an organisation is on; after a change, Invalidate makes
// the next request see it.
func ExampleResolver_QuotaFunc() {
	orgs := map[string]policy.Subject{
		"acme":   {Plan: "pro"},
		"globex": {Plan: "pro", Overrides: map[string]int64{"email_send": 5000}},
	}
	subjects := policy.MustSubjects(func(_ context.Context, org string) (policy.Subject, error) {
		return orgs[org], nil // a database query in a real application
	}, policy.CacheConfig{TTL: time.Minute})
	plans, _ := policy.NewPlans(map[string]map[string]int64{"pro": {"email_send": 500}})
	r := &policy.Resolver{Plans: plans, Subjects: subjects}

	org := func(req *core.Request) (string, error) { return req.Header.Get("X-Org"), nil }
	eng := core.MustNew(core.Config{
		Store: memstore.MustNew(memstore.Config{}),
		Budgets: []core.Budget{{
			Name: "email_send", Quota: 1000, Window: time.Minute, Key: org,
			QuotaFunc: r.QuotaFunc("email_send", policy.ByPlan, 1000, nil),
		}},
	})
	layer := eng.MustLayer(core.Use("email_send"))
	send := func(name string) {
		req := &core.Request{Method: "POST", Header: http.Header{"X-Org": {name}}}
		var d core.Decision
		layer.Decide(req, &d)
		fmt.Printf("%s: quota %d, remaining %d\n", name, d.Results[0].Limit.Quota, d.Results[0].Remaining)
	}
	send("acme")   // base 1000 + pro 500
	send("globex") // the override
	orgs["acme"] = policy.Subject{Plan: "pro", Overrides: map[string]int64{"email_send": 3000}}
	subjects.Invalidate("acme")
	send("acme") // at once, with the count kept
	// Output:
	// acme: quota 1500, remaining 1499
	// globex: quota 5000, remaining 4999
	// acme: quota 3000, remaining 2998
}

// Budgets are declared in YAML (or JSON), with values from the
// environment, and key functions named by the application.
func ExampleParse() {
	doc := `
tiers:
  small: {share: 25%, up_to: 100}
  large: {share: 100%}
budgets:
  t_mutate:
    quota: 300
    window: 1m
    key: tenant
    quota_by: tier
    ignore_methods: [GET, HEAD, OPTIONS]
  public_login:
    quota: {env: PUBLIC_RATE_LIMIT, default: 20}
    window: {env: PUBLIC_RATE_WINDOW, default: 1m}
    key: ip
    failure_mode: closed
layers:
  writes: {use: [t_mutate]}
`
	tenants := policy.MustSubjects(func(_ context.Context, tenant string) (policy.Subject, error) {
		return policy.Subject{Cap: 80}, nil // the tenant's licence: 80 subscribers
	}, policy.CacheConfig{})
	opts := policy.LoadConfig{
		Keys: map[string]core.KeyFunc{
			"tenant": func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
			"ip":     func(r *core.Request) (string, error) { return r.RemoteAddr, nil },
		},
		Subjects: tenants,
		Env: func(name string) (string, bool) {
			if name == "PUBLIC_RATE_LIMIT" {
				return "10", true
			}
			return "", false
		},
	}
	cfg, err := policy.Parse("policy.yaml", []byte(doc), opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, b := range cfg.Budgets() {
		s, _ := cfg.QuotaBy(b.Name)
		fmt.Printf("%s: %d per %v, key %s, %s\n", b.Name, b.Quota, b.Window, b.KeyClass, s)
	}
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: cfg.Budgets()})
	writes, _ := cfg.Layer(eng, "writes")
	var d core.Decision
	writes.Decide(&core.Request{Method: "POST", Header: http.Header{"X-Tenant": {"acme"}}}, &d)
	fmt.Println("t_mutate for a small tenant:", d.Results[0].Limit.Quota)

	_, err = policy.Parse("policy.yaml", []byte("budgets:\n  b: {quota: 0, window: 60, key: tenat}\n"), opts)
	fmt.Println(err)
	// Output:
	// t_mutate: 300 per 1m0s, key tenant, tier
	// public_login: 10 per 1m0s, key ip, flat
	// t_mutate for a small tenant: 75
	// quotagate: invalid configuration
	// 	policy.yaml:2:14: budgets.b.quota: quota 0 is below 1
	// 	policy.yaml:2:25: budgets.b.window: window "60" is not a duration with a unit, such as 500ms, 60s or 1m
	// 	policy.yaml:2:34: budgets.b.key: unknown key function "tenat" (did you mean "tenant"?); known: ip, tenant
}

// On SIGHUP the application re-reads its policy file; the engine swaps to
// it atomically, keeping the counts of unchanged budgets.
func ExampleReloader() {
	dir, _ := os.MkdirTemp("", "policy")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policy.yaml")
	os.WriteFile(path, []byte("budgets:\n  api: {quota: 100, window: 1m, key: global}\n"), 0o600)

	opts := policy.LoadConfig{Keys: map[string]core.KeyFunc{
		"global": func(*core.Request) (string, error) { return "all", nil },
	}}
	cfg, err := policy.Load(path, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: cfg.Budgets()})
	api := eng.MustLayer(core.Use("api"))
	reloader := policy.NewReloader(eng, path, opts, cfg)

	sighup := make(chan os.Signal, 1)
	signal.Notify(sighup, syscall.SIGHUP)
	defer signal.Stop(sighup)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloaded := make(chan error)
	go reloader.Watch(ctx, sighup, func(err error) { reloaded <- err })

	decide := func() {
		var d core.Decision
		api.Decide(&core.Request{Method: "GET"}, &d)
		fmt.Printf("quota %d, remaining %d\n", d.Results[0].Limit.Quota, d.Results[0].Remaining)
	}
	decide()
	os.WriteFile(path, []byte("budgets:\n  api: {quota: 500, window: 1m, key: global}\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP) // what `kill -HUP <pid>` does
	fmt.Println("reload:", <-reloaded)
	decide()
	// Output:
	// quota 100, remaining 99
	// reload: <nil>
	// quota 500, remaining 498
}

// The calculator turns a limit into the numbers to configure and publish.
func ExampleCalculate() {
	fmt.Println("| Limit | Min spacing | Sustained rate | Suggested burst (10×–20×/s) | Retry-After (bucket) | Retry-After (fixed window, worst) | Fixed-window peak |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, x := range []struct {
		q int64
		w time.Duration
	}{{20, time.Minute}, {120, time.Minute}, {300, time.Minute}, {5, time.Minute}, {1000, time.Minute}, {100, time.Second}, {5000, time.Hour}} {
		l, _ := policy.Calculate(x.q, x.w)
		fmt.Printf("| %d / %v | %v | %.3g/s | %d–%d | %v | %v | %d |\n",
			l.Quota, l.Window, l.Spacing, l.PerSecond, l.Burst, l.BurstHigh, l.RetryAfter, l.RetryAfterWindow, l.FixedWindowPeak)
	}
	// Output:
	// | Limit | Min spacing | Sustained rate | Suggested burst (10×–20×/s) | Retry-After (bucket) | Retry-After (fixed window, worst) | Fixed-window peak |
	// |---|---|---|---|---|---|---|
	// | 20 / 1m0s | 3s | 0.333/s | 4–7 | 3s | 1m0s | 40 |
	// | 120 / 1m0s | 500ms | 2/s | 20–40 | 1s | 1m0s | 240 |
	// | 300 / 1m0s | 200ms | 5/s | 50–100 | 1s | 1m0s | 600 |
	// | 5 / 1m0s | 12s | 0.0833/s | 1–2 | 12s | 1m0s | 10 |
	// | 1000 / 1m0s | 60ms | 16.7/s | 167–334 | 1s | 1m0s | 2000 |
	// | 100 / 1s | 10ms | 100/s | 100–100 | 1s | 1s | 200 |
	// | 5000 / 1h0m0s | 720ms | 1.39/s | 14–28 | 1s | 1h0m0s | 10000 |
}

// Tiers can be plain quotas, and the file itself can say which tenant is
// in which tier: no lookup function, no cache. Mistakes are reported
// together, each at its place.
func ExampleParse_subjects() {
	doc := `
tiers:
  free: 100/min
  pro: 1000/min
  enterprise: 10000/min
tier_fallback: free          # tenants not listed below
subjects:
  acme: pro
  globex: enterprise
  initech: {tier: pro, overrides: {api: 5000}}
budgets:
  api: {window: 1m, key: tenant, quota_by: tier}
`
	tenant := func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	opts := policy.LoadConfig{Keys: map[string]core.KeyFunc{"tenant": tenant}}
	cfg, err := policy.Parse("policy.yaml", []byte(doc), opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: cfg.Budgets()})
	api := eng.MustLayer(core.Use("api"))
	for _, name := range []string{"acme", "globex", "initech", "someone-else"} {
		var d core.Decision
		api.Decide(&core.Request{Method: "GET", Header: http.Header{"X-Tenant": {name}}}, &d)
		fmt.Printf("%s: %d per %v\n", name, d.Results[0].Limit.Quota, d.Results[0].Limit.Window)
	}

	bad := `
tiers:
  free: 100/fortnight
  pro: 1000/min
subjects:
  acme: gold
  acme: pro
budgets:
  api: {quota: 100, window: 1m, key: tenant, quota_by: tier}
`
	_, err = policy.Parse("policy.yaml", []byte(bad), opts)
	fmt.Println(err)
	// Output:
	// acme: 1000 per 1m0s
	// globex: 10000 per 1m0s
	// initech: 5000 per 1m0s
	// someone-else: 100 per 1m0s
	// quotagate: invalid configuration
	// 	policy.yaml:3:9: tiers.free: quota "100/fortnight": "fortnight" is not a window: write s, min, hour, day or a duration such as 10s
	// 	policy.yaml:6:9: subjects.acme: unknown tier "gold"; defined: free, pro
	// 	policy.yaml:7:3: subjects.acme: "acme" is defined twice (first at line 6)
}

// A price list's "plan free 60/min, pro 600/min" gives each customer its
// quota outright: tiers, with subjects saying who is in which. Plans add an
// increment to one base quota; the same quotas written that way resolve
// alike.
func ExampleParse_tiersOrPlans() {
	tiers := `
# tier: a subject's whole quota (free: 60/min), or a share of the budget's quota (25%)
# plan: an increment added to a budget's base quota (plans: {pro: {api: 540}})
tiers:
  free: 60/min
  pro: 600/min
tier_fallback: free        # every tenant not listed below
subjects:
  acme: pro
budgets:
  api: {window: 1m, key: tenant, quota_by: tier}
`
	plans := `
plans:
  pro: {api: 540}            # base 60 + 540: 600 a minute
subjects:
  acme: {plan: pro}          # a tenant not listed gets the base
budgets:
  api: {quota: 60, window: 1m, key: tenant, quota_by: plan}
`
	tenant := func(r *core.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	opts := policy.LoadConfig{Keys: map[string]core.KeyFunc{"tenant": tenant}}
	for _, doc := range []string{tiers, plans} {
		cfg, err := policy.Parse("policy.yaml", []byte(doc), opts)
		if err != nil {
			fmt.Println(err)
			return
		}
		by, _ := cfg.QuotaBy("api")
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: cfg.Budgets()})
		api := eng.MustLayer(core.Use("api"))
		fmt.Printf("quota_by %s:", by)
		for _, name := range []string{"acme", "someone-else"} {
			var d core.Decision
			api.Decide(&core.Request{Method: "GET", Header: http.Header{"X-Tenant": {name}}}, &d)
			fmt.Printf(" %s %d/%v", name, d.Results[0].Limit.Quota, d.Results[0].Limit.Window)
		}
		fmt.Println()
	}
	// Output:
	// quota_by tier: acme 600/1m0s someone-else 60/1m0s
	// quota_by plan: acme 600/1m0s someone-else 60/1m0s
}

// A budget scaled by the process's CPU use: the signal is a function the
// program names in LoadConfig.Signals, and the document's Controller is
// there to watch (core/metrics WatchScale) or read. A second budget is
// halved around the clock by a schedule, to show a scale below 1.
func ExampleDocument_Scale() {
	cpuBusy := func() float64 { return 0.4 } // the process's CPU use, 0..1
	doc := []byte(`budgets:
  per_client:
    quota: 600
    window: 1m
    key: ip
    scale: {signal: cpu, target: 70%, min: 25%}
  exports:
    quota: 10
    window: 1h
    key: ip
    scale: {schedule: {"00:00-24:00": 50%}}
`)
	cfg, err := policy.Parse("policy.yaml", doc, policy.LoadConfig{
		Keys:    map[string]core.KeyFunc{"ip": keyfunc.PeerIP()},
		Signals: map[string]func() float64{"cpu": cpuBusy},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range cfg.BudgetNames() {
		c, _ := cfg.Scale(name)
		fmt.Printf("%s: scale %.2f\n", name, c.Scale())
	}
	// Output:
	// per_client: scale 1.00
	// exports: scale 0.50
}
