package policy

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func scaleOptions(t testing.TB, cpu *float64) LoadConfig {
	opts := testOptions(t, map[string]string{"CPU_TARGET": "80%"}, nil)
	opts.Signals = map[string]func() float64{"cpu": func() float64 { return *cpu }, "queue": func() float64 { return 0 }}
	return opts
}

const scaleDoc = `budgets:
  per_ip:
    quota: 100
    window: 1m
    key: ip
    scale: {signal: cpu, target: 70%, min: 25%, step: 0.1, interval: 10ms}
  office:
    quota: 40
    window: 1m
    key: ip
    scale:
      schedule: {"Mon-Fri 09:00-18:00": 50%, "Sat,Sun 00:00-24:00": 1/4}
      zone: Europe/Paris
  both:
    quota: 10
    window: 1m
    key: ip
    scale: {signal: queue, target: {env: CPU_TARGET}, schedule: {"00:00-24:00": 30%}}
  plain: {quota: 5, window: 1m, key: ip}
`

// TestScaleSection: a budget's scale section gives it a Controller, which
// the document returns, and which lowers the budget's quota.
func TestScaleSection(t *testing.T) {
	if _, err := time.LoadLocation("Europe/Paris"); err != nil {
		t.Skip("no time zone database:", err)
	}
	cpu := 0.0
	cfg, err := Parse("s.yaml", []byte(scaleDoc), scaleOptions(t, &cpu))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"per_ip", "office", "both"} {
		c, ok := cfg.Scale(name)
		if !ok || c.Name() != name {
			t.Fatalf("Scale(%q) = %v, %v", name, c, ok)
		}
	}
	if _, ok := cfg.Scale("plain"); ok {
		t.Error("a budget without a scale section has a Controller")
	}
	if _, ok := cfg.Scale("nope"); ok {
		t.Error("an unknown budget has a Controller")
	}
	both, _ := cfg.Scale("both")
	if f := both.Scale(); f != 0.3 {
		t.Errorf("both: scale %v, want the schedule's 0.3 around the clock", f)
	}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	b, _ := eng.Budget("per_ip")
	perIP, _ := cfg.Scale("per_ip")
	if b.Scale != perIP {
		t.Fatalf("the engine's budget is scaled by %v, not the document's Controller", b.Scale)
	}
	cpu = 1.4 // twice the target: a step of 10% per interval
	deadline := time.Now().Add(5 * time.Second)
	for perIP.Scale() > 0.9 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	res, err := eng.Peek(t.Context(), "192.0.2.7", "per_ip")
	if err != nil {
		t.Fatal(err)
	}
	if q := res[0].Limit.Quota; q >= 100 || q%10 != 0 {
		t.Errorf("at twice the target: per_ip's quota %d, want a step or more below 100", q)
	}
}

// TestReloadKeepsTheScale: a reload keeps a budget's Controller while its
// scale section is unchanged, and starts a new one when it changed.
func TestReloadKeepsTheScale(t *testing.T) {
	if _, err := time.LoadLocation("Europe/Paris"); err != nil {
		t.Skip("no time zone database:", err)
	}
	cpu := 0.0
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, scaleDoc)
	opts := scaleOptions(t, &cpu)
	cfg, err := Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	rl := NewReloader(eng, path, opts, cfg)
	perIP, _ := cfg.Scale("per_ip")
	office, _ := cfg.Scale("office")

	// per_ip's quota changes, its scale section does not; office's does.
	writeAtomic(t, path, strings.NewReplacer("quota: 100", "quota: 200", `"Mon-Fri 09:00-18:00": 50%`, `"Mon-Fri 09:00-18:00": 60%`).Replace(scaleDoc))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if c, _ := rl.Current().Scale("per_ip"); c != perIP {
		t.Error("per_ip's scale section is unchanged, but the reload gave it a new Controller")
	}
	if b, _ := eng.Budget("per_ip"); b.Quota != 200 || b.Scale != perIP {
		t.Errorf("per_ip after the reload: quota %d, scale %v; want 200 and the running Controller", b.Quota, b.Scale)
	}
	if c, _ := rl.Current().Scale("office"); c == office || c == nil {
		t.Error("office's schedule changed, but the reload kept its Controller")
	} else if b, _ := eng.Budget("office"); b.Scale != c {
		t.Error("the engine's office budget does not use the new Controller")
	}
}

const scaleHead = "budgets:\n  a:\n    quota: 10\n    window: 1m\n    key: ip\n" // lines 1-5

// TestScaleMistakes lists the mistakes of a scale section with their
// locations.
func TestScaleMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown signal", scaleHead + "    scale: {signal: cpus, target: 70%}\n", `c.yaml:6:21: budgets.a.scale.signal: unknown signal "cpus" (did you mean "cpu"?); known: cpu, queue`},
		{"no signals given", scaleHead + "    scale: {signal: cpu, target: 70%}\n", `none were given (LoadConfig.Signals)`},
		{"target zero", scaleHead + "    scale: {signal: cpu, target: 0}\n", `c.yaml:6:34: budgets.a.scale.target: target 0 is not positive`},
		{"target negative", scaleHead + "    scale: {signal: cpu, target: -5%}\n", `c.yaml:6:34: budgets.a.scale.target: target -5% is not positive`},
		{"target not a number", scaleHead + "    scale: {signal: cpu, target: high}\n", `c.yaml:6:34: budgets.a.scale.target: target "high" is not a number`},
		{"target from the environment", scaleHead + "    scale: {signal: cpu, target: {env: CPU_TARGET}}\n", `c.yaml:6:34: budgets.a.scale.target: environment variable CPU_TARGET="0%": target 0% is not positive`},
		{"signal without target", scaleHead + "    scale: {signal: cpu}\n", `c.yaml:6:21: budgets.a.scale.signal: signal "cpu" needs a target`},
		{"target without signal", scaleHead + "    scale: {target: 70%, schedule: {\"Mon 09:00-10:00\": 50%}}\n", `c.yaml:6:21: budgets.a.scale.target: target is set without a signal`},
		{"min zero", scaleHead + "    scale: {signal: cpu, target: 70%, min: 0}\n", `c.yaml:6:44: budgets.a.scale.min: min 0 is outside (0, 1]`},
		{"min above 1", scaleHead + "    scale: {signal: cpu, target: 70%, min: 150%}\n", `c.yaml:6:44: budgets.a.scale.min: min 150% is outside (0, 1]`},
		{"step above 1", scaleHead + "    scale: {signal: cpu, target: 70%, step: 2}\n", `c.yaml:6:45: budgets.a.scale.step: step 2 is outside (0, 1]`},
		{"deadband 1", scaleHead + "    scale: {signal: cpu, target: 70%, deadband: 100%}\n", `budgets.a.scale.deadband: deadband 100% is outside [0, 1)`},
		{"above zero", scaleHead + "    scale: {signal: cpu, target: 70%, above: 0}\n", `budgets.a.scale.above: above 0 is outside (0, 1]`},
		{"above without signal", scaleHead + "    scale: {above: 50%, schedule: {\"Mon 09:00-10:00\": 50%}}\n", `budgets.a.scale.above: above is a threshold on the signal, and this scale section has none`},
		{"interval without unit", scaleHead + "    scale: {signal: cpu, target: 70%, interval: 5}\n", `c.yaml:6:49: budgets.a.scale.interval: interval "5" is not a duration with a unit`},
		{"unknown field", scaleHead + "    scale: {signal: cpu, target: 70%, mni: 25%}\n", `c.yaml:6:39: budgets.a.scale.mni: unknown field "mni" in the scale section of budget "a" (did you mean "min"?)`},
		{"not a mapping", scaleHead + "    scale: 50%\n", `c.yaml:6:12: budgets.a.scale: the scale section of budget "a" must be a mapping, not a value`},
		{"empty section", scaleHead + "    scale: {}\n", `c.yaml:6:12: budgets.a.scale: a scale section needs a signal`},
		{"bad period", scaleHead + "    scale:\n      schedule: {\"Mon-Fry 09:00-18:00\": 50%}\n", `c.yaml:7:18: budgets.a.scale.schedule["Mon-Fry 09:00-18:00"]: period "Mon-Fry 09:00-18:00": unknown day "Fry"`},
		{"period without times", scaleHead + "    scale:\n      schedule: {\"Mon-Fri\": 50%}\n", `c.yaml:7:18: budgets.a.scale.schedule.Mon-Fri: period "Mon-Fri": no time range`},
		{"period's scale above 1", scaleHead + "    scale:\n      schedule: {\"Mon-Fri 09:00-18:00\": 120%}\n", `c.yaml:7:41: budgets.a.scale.schedule["Mon-Fri 09:00-18:00"]: scale 120% of period "Mon-Fri 09:00-18:00" is outside (0, 1]`},
		{"period's scale not a number", scaleHead + "    scale:\n      schedule: {\"Mon-Fri 09:00-18:00\": half}\n", `c.yaml:7:41: budgets.a.scale.schedule["Mon-Fri 09:00-18:00"]: a period's scale "half" is not a number`},
		{"schedule a list", scaleHead + "    scale:\n      schedule: [\"Mon-Fri 09:00-18:00\"]\n", `c.yaml:7:17: budgets.a.scale.schedule: schedule must be a mapping, not a list`},
		{"schedule empty", scaleHead + "    scale:\n      schedule: {}\n", `c.yaml:7:17: budgets.a.scale.schedule: schedule is empty`},
		{"unknown zone", scaleHead + "    scale:\n      schedule: {\"Mon-Fri 09:00-18:00\": 50%}\n      zone: Europe/Pariss\n", `c.yaml:8:13: budgets.a.scale.zone: unknown time zone "Europe/Pariss"`},
		{"zone Local", scaleHead + "    scale:\n      schedule: {\"Mon-Fri 09:00-18:00\": 50%}\n      zone: Local\n", `c.yaml:8:13: budgets.a.scale.zone: unknown time zone "Local"`},
		{"zone without schedule", scaleHead + "    scale: {signal: cpu, target: 70%, zone: UTC}\n", `c.yaml:6:45: budgets.a.scale.zone: zone applies to a schedule`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpu := 0.0
			opts := scaleOptions(t, &cpu)
			opts.Env = envOf(map[string]string{"CPU_TARGET": "0%"})
			if tc.name == "no signals given" {
				opts.Signals = nil
			}
			_, err := Parse("c.yaml", []byte(tc.doc), opts)
			assertProblem(t, err, tc.want)
		})
	}
}

// TestScaleMistakesJSON: the same mistakes in JSON are located by
// JSONPath.
func TestScaleMistakesJSON(t *testing.T) {
	cpu := 0.0
	doc := `{"budgets": {"a": {"quota": 10, "window": "1m", "key": "ip", "scale": {"schedule": {"Mon-Fri 9:00-18:00": "50%"}}}}}`
	_, err := Parse("c.json", []byte(doc), scaleOptions(t, &cpu))
	assertProblem(t, err, `c.json: $.budgets.a.scale.schedule["Mon-Fri 9:00-18:00"]: period "Mon-Fri 9:00-18:00": time "9:00" is not HH:MM`)
}

// TestScaleThreshold: above reaches the Controller: a signal above target
// sets the threshold's scale at the next update.
func TestScaleThreshold(t *testing.T) {
	cpu := 0.0
	doc := scaleHead + "    scale: {signal: cpu, target: 80%, above: 50%, deadband: 0, interval: 1ms}\n"
	cfg, err := Parse("c.yaml", []byte(doc), scaleOptions(t, &cpu))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := cfg.Scale("a")
	cpu = 0.95
	time.Sleep(5 * time.Millisecond) // past the Controller's Interval
	if f := c.Scale(); f != 0.5 {
		t.Errorf("cpu 95%% over a target of 80%% with above: 50%%: scale %v, want 0.5", f)
	}
}
