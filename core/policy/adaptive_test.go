package policy

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
	"github.com/quotagate/quotagate/core/memstore"
)

func adaptiveOptions(t testing.TB) LoadConfig {
	opts := testOptions(t, nil, nil)
	opts.Priorities = map[string]func(*core.Request) adaptive.Priority{
		"by_method": func(r *core.Request) adaptive.Priority {
			if r.Method == "GET" {
				return adaptive.Sheddable
			}
			return adaptive.Critical
		},
	}
	opts.Signals = map[string]func() float64{"queue": func() float64 { return 3 }}
	return opts
}

const adaptiveDoc = `budgets:
  per_ip: {quota: 100, window: 1m, key: ip}
layers:
  api:
    use: [per_ip]
    adaptive: {initial: 4, min: 2, max: 50, tolerance: 150%, smoothing: 0.25, samples: 5, sample_every: 1,
               normal_share: 3/4, sheddable_share: 50%, max_retry_after: 3s, priority: by_method}
  shed_only:
    adaptive: {name: queue_guard, initial: 3, signal: queue, target: 10}
`

func TestAdaptiveSection(t *testing.T) {
	cfg, err := Parse("a.yaml", []byte(adaptiveDoc), adaptiveOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})

	api, err := cfg.Layer(eng, "api")
	if err != nil {
		t.Fatal(err)
	}
	lim, ok := cfg.Adaptive("api")
	if !ok || lim.Name() != "api" || lim.Stats().Limit != 4 {
		t.Fatalf("api's limit: %v, %v", lim, ok)
	}
	// GET is sheddable: half of 4.
	var ds [3]core.Decision
	for i := range ds {
		api.Decide(req("GET", "X-Forwarded-For", "192.0.2.1"), &ds[i])
	}
	if !ds[0].Allowed || !ds[1].Allowed || ds[2].Allowed || ds[2].Reason != core.ReasonOverloaded || ds[2].DeniedBy != "api" || ds[2].Guard.Limit != 2 {
		t.Errorf("GETs: %v %v %v (%v by %q, guard %+v)", ds[0].Allowed, ds[1].Allowed, ds[2].Allowed, ds[2].Reason, ds[2].DeniedBy, ds[2].Guard)
	}
	if len(ds[0].Results) != 1 || ds[0].Results[0].Budget != "per_ip" {
		t.Errorf("api's budgets were not evaluated: %+v", ds[0].Results)
	}
	for i := range ds {
		ds[i].Done(context.Background(), 200)
	}
	if s := lim.Stats(); s.InFlight != 0 {
		t.Errorf("in flight after Done: %d", s.InFlight)
	}

	shed, err := cfg.Layer(eng, "shed_only")
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := cfg.Adaptive("shed_only"); l.Name() != "queue_guard" {
		t.Errorf("shed_only's limit is named %q", l.Name())
	}
	var d core.Decision
	shed.Decide(req("POST"), &d)
	if !d.Allowed || len(d.Results) != 0 || d.Guard.Name != "queue_guard" {
		t.Errorf("a layer of an adaptive limit alone: allowed %v, %d results, guard %+v", d.Allowed, len(d.Results), d.Guard)
	}
	if _, ok := cfg.Adaptive("nope"); ok {
		t.Error("Adaptive of an unknown layer")
	}
}

func TestAdaptiveMistakes(t *testing.T) {
	const head = "budgets:\n  b: {quota: 1, window: 1m, key: ip}\nlayers:\n" // lines 1-3
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"unknown field", head + "  l:\n    adaptive: {initail: 5}\n",
			[]string{`a.yaml:5:16: layers.l.adaptive.initail: unknown field "initail" in the adaptive section of layer "l" (did you mean "initial"?)`}},
		{"not a mapping", head + "  l: {adaptive: 5}\n",
			[]string{`a.yaml:4:17: layers.l.adaptive: the adaptive section of layer "l" must be a mapping, not a value`}},
		{"limits", head + "  l:\n    adaptive: {min: 10, max: 5, initial: 0}\n",
			[]string{`a.yaml:5:42: layers.l.adaptive.initial: initial 0 is below 1`}},
		{"limits checked together", head + "  l:\n    adaptive: {min: 10, max: 5}\n",
			[]string{`a.yaml:5:15: layers.l.adaptive: adaptive "l": max 5 is below min 10`}},
		{"shares", head + "  l:\n    adaptive: {tolerance: lots, normal_share: 2, sheddable_share: 95%}\n",
			[]string{`a.yaml:5:27: layers.l.adaptive.tolerance: tolerance: share "lots": want a percentage`, `layers.l.adaptive: adaptive "l": normal share 2 is outside (0, 1]`}},
		{"priority name", head + "  l:\n    adaptive: {priority: by_metod}\n",
			[]string{`a.yaml:5:26: layers.l.adaptive.priority: unknown priority function "by_metod" (did you mean "by_method"?); known: by_method`}},
		{"signal without target", head + "  l:\n    adaptive: {signal: queue}\n",
			[]string{`a signal needs a positive target`}},
		{"target not a number", head + "  l:\n    adaptive: {signal: queue, target: high}\n",
			[]string{`target "high" is not a number`}},
		{"no use and no adaptive", head + "  l: {cost: 1}\n",
			[]string{`a.yaml:4:3: layers.l: layer "l" has no use list (the budgets it applies) and no adaptive section`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("a.yaml", []byte(tc.doc), adaptiveOptions(t))
			var ce *core.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestAdaptiveSectionJSON(t *testing.T) {
	doc := `{"budgets": {"b": {"quota": 1, "window": "1m", "key": "ip"}},
 "layers": {"l": {"adaptive": {"initial": 7, "max_retry_after": "2s", "min": "x"}}}}`
	_, err := Parse("a.json", []byte(doc), adaptiveOptions(t))
	if err == nil || !strings.Contains(err.Error(), `$.layers.l.adaptive.min: min "x" is not a whole number`) {
		t.Errorf("err = %v", err)
	}
	cfg, err := Parse("a.json", []byte(strings.Replace(doc, `, "min": "x"`, "", 1)), adaptiveOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := cfg.Adaptive("l"); !ok || l.Stats().Limit != 7 {
		t.Errorf("limit = %v, %v", l, ok)
	}
}

func TestReloadKeepsTheAdaptiveLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, adaptiveDoc)
	opts := adaptiveOptions(t)
	cfg, err := Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	if _, err := cfg.Layer(eng, "api"); err != nil {
		t.Fatal(err)
	}
	rl := NewReloader(eng, path, opts, cfg)
	before, _ := rl.Current().Adaptive("api")
	// A budget's quota changes: the layers, and so the limiter, stay.
	writeAtomic(t, path, strings.Replace(adaptiveDoc, "quota: 100", "quota: 200", 1))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if b, _ := eng.Budget("per_ip"); b.Quota != 200 {
		t.Fatalf("not reloaded: quota %d", b.Quota)
	}
	after, _ := rl.Current().Adaptive("api")
	if after != before {
		t.Error("the reloaded configuration has a limiter of its own, not the running layer's")
	}
	// A changed adaptive section is a changed layer: refused.
	writeAtomic(t, path, strings.Replace(adaptiveDoc, "initial: 4", "initial: 5", 1))
	err = rl.Reload()
	if err == nil || !strings.Contains(err.Error(), `layer "api" changed`) {
		t.Errorf("err = %v", err)
	}
}
