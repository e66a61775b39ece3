package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core/scale"
)

// A budget's scale section lowers its quota with the load on the process
// or on a weekly schedule (core/scale):
//
//	budgets:
//	  per_client:
//	    quota: 600
//	    window: 1m
//	    key: ip
//	    scale:
//	      signal: cpu          # a name in LoadConfig.Signals ...
//	      target: 70%          # ... and the value to keep it at
//	      min: 25%             # every field below is optional
//	      step: 5%             # the most one update moves the scale
//	      deadband: 5%         # how far off the scale must be to move
//	      above: 50%           # a threshold instead: this scale while the signal is above target
//	      interval: 500ms
//	      schedule:            # period → scale
//	        "Mon-Fri 09:00-18:00": 50%
//	      zone: Europe/Paris   # the schedule's time zone; default UTC
//
// A scale section needs a signal (with its target) or a schedule, or both.
// Each budget gets a Controller of its own, named after the budget
// ([Document.Scale]). A reload keeps a budget's Controller, and so its
// scale, when the budget's scale section is unchanged (the same settings
// and signal name); a budget whose section changed, or that is new, starts
// a new Controller at full scale (or its schedule's).

// scaleFields are the fields of a budget's scale section.
var scaleFields = []string{"signal", "target", "min", "step", "deadband", "above", "interval", "schedule", "zone"}

// scaleSpec is a budget's scale section, decoded, and its controller.
type scaleSpec struct {
	text string // the decoded configuration, to compare on reload
	ctl  *scale.Controller
}

// budgetScale decodes budget k's scale section, if n has one, into s.
func (d *decoder) budgetScale(k, n *node, s *budgetSpec) {
	sn := n.field("scale")
	if sn == nil || !d.fields(sn, fmt.Sprintf("the scale section of budget %q", k.text), scaleFields...) {
		return
	}
	before := len(d.probs)
	cfg := scale.Config{Name: k.text}
	sigName := ""
	if v := sn.field("signal"); v != nil {
		if name, ok := named(d, v, "signal", "Signals", d.opts.Signals); ok {
			sigName, cfg.Signal = name, d.opts.Signals[name]
		}
	}
	tn := sn.field("target")
	if tn != nil {
		if x, v, ok := d.amount(tn, "target"); ok && !(x > 0) {
			d.fail(v, fmt.Errorf("target %s is not positive", v.text))
		} else if ok {
			cfg.Target = x
		}
	}
	switch sig := sn.field("signal"); {
	case sig != nil && tn == nil:
		d.badf(sig.at, "signal %q needs a target, the value to keep it at (target: 70%%)", sigName)
	case sig == nil && tn != nil:
		d.badf(tn.at, "target is set without a signal (signal: <a name in LoadConfig.Signals>)")
	}
	share := func(field string, dst *float64) {
		if v := sn.field(field); v != nil {
			if x, val, ok := d.amount(v, field); ok && !(x > 0 && x <= 1) {
				d.fail(val, fmt.Errorf("%s %s is outside (0, 1]", field, val.text))
			} else if ok {
				*dst = x
			}
		}
	}
	share("min", &cfg.Min)
	share("step", &cfg.Step)
	share("above", &cfg.Above)
	if v := sn.field("deadband"); v != nil {
		if x, val, ok := d.amount(v, "deadband"); ok && !(x >= 0 && x < 1) {
			d.fail(val, fmt.Errorf("deadband %s is outside [0, 1)", val.text))
		} else if ok {
			cfg.Deadband = x
			if x == 0 {
				cfg.Deadband = -1 // none; 0 is the default in scale.Config
			}
		}
	}
	if v := sn.field("above"); v != nil && sn.field("signal") == nil {
		d.badf(v.at, "above is a threshold on the signal, and this scale section has none")
	}
	if v := sn.field("interval"); v != nil {
		cfg.Interval, _ = d.duration(v, "interval")
	}
	if v := sn.field("schedule"); v != nil {
		cfg.Schedule = d.schedule(v)
	}
	if v := sn.field("zone"); v != nil {
		if sn.field("schedule") == nil {
			d.badf(v.at, "zone applies to a schedule, and this scale section has none")
		}
		if name, ok := d.name(v, "zone"); ok {
			if loc, err := time.LoadLocation(name); err != nil || name == "Local" {
				zv, _ := d.scalar(v, "zone")
				d.fail(zv, fmt.Errorf("unknown time zone %q (an IANA name, such as Europe/Paris or UTC)", name))
			} else {
				cfg.Location = loc
			}
		}
	}
	if sn.field("signal") == nil && sn.field("schedule") == nil {
		d.badf(sn.at, "a scale section needs a signal (signal: cpu, target: 70%%) or a schedule (schedule: {\"Mon-Fri 09:00-18:00\": 50%%})")
	}
	if len(d.probs) > before {
		return
	}
	ctl, err := scale.New(cfg)
	if err != nil {
		for _, p := range unwrapAll(err) {
			d.bad(sn.at, p)
		}
		return
	}
	s.scale = &scaleSpec{text: scaleText(cfg, sigName), ctl: ctl}
	s.b.Scale = ctl
}

// scaleText writes cfg, whose signal is named sigName, to compare on
// reload.
func scaleText(cfg scale.Config, sigName string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "signal=%s target=%v min=%v step=%v deadband=%v above=%v interval=%v zone=%v",
		sigName, cfg.Target, cfg.Min, cfg.Step, cfg.Deadband, cfg.Above, cfg.Interval, cfg.Location)
	for _, p := range cfg.Schedule {
		fmt.Fprintf(&b, " %q=%v", p.String(), p.Scale)
	}
	return b.String()
}

// schedule reads a scale section's schedule: a mapping of periods
// ("Mon-Fri 09:00-18:00") to scales.
func (d *decoder) schedule(n *node) []scale.Period {
	if !d.isMap(n, "schedule") {
		return nil
	}
	if len(n.keys) == 0 {
		d.badf(n.at, "schedule is empty; give periods and their scales (\"Mon-Fri 09:00-18:00\": 50%%)")
	}
	var out []scale.Period
	for i, k := range n.keys {
		p, err := scale.ParsePeriod(k.text)
		if err != nil {
			d.bad(k.at, fmtPeriodErr(err))
			continue
		}
		x, v, ok := d.amount(n.vals[i], "a period's scale")
		if !ok {
			continue
		}
		if !(x > 0 && x <= 1) {
			d.fail(v, fmt.Errorf("scale %s of period %q is outside (0, 1]", v.text, k.text))
			continue
		}
		p.Scale = x
		out = append(out, p)
	}
	return out
}

// fmtPeriodErr drops the "quotagate: " prefix of a ParsePeriod error,
// which the ConfigError around the problem carries.
func fmtPeriodErr(err error) error {
	return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "quotagate: scale: "))
}

// amount reads a number, written as a decimal ("0.7", "20"), a
// percentage ("70%") or a fraction ("1/4"), and returns it with the value it was read from.
func (d *decoder) amount(n *node, what string) (float64, val, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return 0, v, false
	}
	if strings.Contains(v.text, "/") { // a fraction, as a share: "1/4"
		sh, err := ParseShare(v.text)
		if err != nil {
			d.fail(v, fmt.Errorf("%s: %w", what, err))
			return 0, v, false
		}
		num, den := sh.Fraction()
		return float64(num) / float64(den), v, true
	}
	t, div := v.text, 1.0
	if s, ok := strings.CutSuffix(t, "%"); ok {
		t, div = strings.TrimSpace(s), 100
	}
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		d.fail(v, fmt.Errorf("%s %q is not a number (0.7, 70%%, 1/4 or 20)", what, v.text))
		return 0, v, false
	}
	return x / div, v, true
}

// keepScales makes c's budgets use the controllers of prev's budgets of
// the same name whose scale section is unchanged, so that their scale
// carries over a reload.
func (c *Document) keepScales(prev *Document) {
	old := map[string]*scaleSpec{}
	for _, s := range prev.budgets {
		if s.scale != nil {
			old[s.b.Name] = s.scale
		}
	}
	for _, s := range c.budgets {
		if o := old[s.b.Name]; s.scale != nil && o != nil && o.text == s.scale.text {
			s.scale.ctl = o.ctl
			s.b.Scale = o.ctl
		}
	}
}

// Scale returns the Controller of the named budget's scale section, for
// metrics (core/metrics WatchScale) or Stats; false when the budget has
// none.
func (c *Document) Scale(budget string) (*scale.Controller, bool) {
	for _, s := range c.budgets {
		if s.b.Name == budget && s.scale != nil {
			return s.scale.ctl, true
		}
	}
	return nil, false
}
