package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Format is a configuration document's syntax.
type Format int

const (
	// FormatAuto picks JSON for a ".json" file name, YAML for ".yaml" and
	// ".yml", and otherwise JSON when the document starts with "{".
	FormatAuto Format = iota
	// FormatYAML reads YAML.
	FormatYAML
	// FormatJSON reads JSON.
	FormatJSON
)

// Options says how to read a configuration.
type Options struct {
	// Keys are the key functions budgets name in their key, fallback_key
	// and subject fields, for example "ip", "apikey", "tenant",
	// "tenant+operator", "subscriber", "global". A name not in Keys is a
	// configuration error.
	Keys map[string]core.KeyFunc
	// Subjects finds the subject (tier, plan, overrides) of a key. Required
	// when any budget is tier- or plan-scaled. Keep one Subjects for the
	// life of the process and pass it to every load, so reloads keep the
	// cache.
	Subjects *Subjects
	// Env looks up environment variables. Default os.LookupEnv.
	Env func(name string) (string, bool)
	// Format is the document's syntax. Default FormatAuto.
	Format Format
}

// MaxDocumentSize is the largest configuration document accepted.
const MaxDocumentSize = 4 << 20

// Problem is one configuration mistake and where it is. Parse and Load
// return every problem they find in a *core.ConfigError whose Problems are
// *Problem values.
type Problem struct {
	// File is the document's name.
	File string
	// Line and Column locate the mistake in a YAML document (and a JSON
	// syntax error); 0 when unknown.
	Line, Column int
	// Path is the value's path: dotted in YAML ("budgets.t_mutate.quota"),
	// JSONPath in JSON ("$.budgets.t_mutate.quota").
	Path string
	// Err says what is wrong.
	Err error
}

// Error returns "file:line:col: path: problem" (YAML) or
// "file: path: problem" (JSON).
func (p *Problem) Error() string {
	var sb strings.Builder
	sb.WriteString(p.File)
	if p.Line > 0 {
		sb.WriteString(":" + strconv.Itoa(p.Line))
		if p.Column > 0 {
			sb.WriteString(":" + strconv.Itoa(p.Column))
		}
	}
	sb.WriteString(": ")
	if p.Path != "" {
		sb.WriteString(p.Path + ": ")
	}
	sb.WriteString(p.Err.Error())
	return sb.String()
}

// Unwrap returns the underlying error.
func (p *Problem) Unwrap() error { return p.Err }

// EnvError is the Err of a Problem caused by an environment variable: one
// that is unset without a default, empty, or holds an invalid value.
type EnvError struct {
	// Var is the variable's name.
	Var string
	// Value is its value ("" when unset).
	Value string
	// Err says what is wrong.
	Err error
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("environment variable %s=%q: %v", e.Var, e.Value, e.Err)
}

// Unwrap returns the underlying error.
func (e *EnvError) Unwrap() error { return e.Err }

// Config is a loaded, validated configuration: budgets ready for
// core.New or core.Engine.Reload, the layers it declares, and the resolver
// of its scaled budgets.
type Config struct {
	file     string
	budgets  []*budgetSpec
	layers   []*layerSpec
	resolver *Resolver
}

type budgetSpec struct {
	b       core.Budget
	scaling Scaling
	subject core.KeyFunc
	at      where
	ok      bool
}

type layerSpec struct {
	name  string
	at    where
	use   []string
	cost  int64
	costs map[string]int64
}

// Load reads and validates the configuration file at path.
func Load(path string, opts Options) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data := make([]byte, 0, 4096)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := f.Read(buf)
		data = append(data, buf[:n]...)
		if len(data) > MaxDocumentSize {
			return nil, &core.ConfigError{Problems: []error{&Problem{File: path, Err: fmt.Errorf("larger than %d bytes", MaxDocumentSize)}}}
		}
		if rerr != nil {
			break
		}
	}
	return Parse(path, data, opts)
}

// Parse reads and validates a configuration document; name is used in
// problem locations and to pick the format. The error is a
// *core.ConfigError listing every problem, each a *Problem.
func Parse(name string, data []byte, opts Options) (*Config, error) {
	if len(data) > MaxDocumentSize {
		return nil, &core.ConfigError{Problems: []error{&Problem{File: name, Err: fmt.Errorf("larger than %d bytes", MaxDocumentSize)}}}
	}
	format := opts.Format
	if format == FormatAuto {
		switch strings.ToLower(filepath.Ext(name)) {
		case ".json":
			format = FormatJSON
		case ".yaml", ".yml":
			format = FormatYAML
		default:
			format = FormatYAML
			if t := strings.TrimSpace(string(data[:min(len(data), 512)])); strings.HasPrefix(t, "{") {
				format = FormatJSON
			}
		}
	}
	var root *node
	var probs []*Problem
	if format == FormatJSON {
		root, probs = parseJSON(name, data)
	} else {
		root, probs = parseYAML(name, data)
	}
	if len(probs) > 0 {
		return nil, problems(probs)
	}
	d := &decoder{file: name, json: format == FormatJSON, opts: opts}
	if d.opts.Env == nil {
		d.opts.Env = os.LookupEnv
	}
	cfg := d.config(root)
	if len(d.probs) > 0 {
		return nil, problems(onceper(d.probs))
	}
	return cfg, nil
}

func problems(ps []*Problem) error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return &core.ConfigError{Problems: errs}
}

// File returns the name the configuration was read from.
func (c *Config) File() string { return c.file }

// Budgets returns the configured budgets, ready for core.Config.Budgets
// or core.Engine.Reload. Scaled budgets carry a QuotaFunc resolving their
// quota through the configuration's Resolver; their Quota is the reference
// (tier) or base (plan) quota the engine falls back to.
func (c *Config) Budgets() []core.Budget {
	out := make([]core.Budget, len(c.budgets))
	for i, s := range c.budgets {
		out[i] = s.b
		out[i].IgnoreMethods = slices.Clone(s.b.IgnoreMethods)
	}
	return out
}

// BudgetNames returns the budget names in document order.
func (c *Config) BudgetNames() []string {
	out := make([]string, len(c.budgets))
	for i, s := range c.budgets {
		out[i] = s.b.Name
	}
	return out
}

// Scaling returns how the named budget's quota is resolved.
func (c *Config) Scaling(budget string) (Scaling, bool) {
	for _, s := range c.budgets {
		if s.b.Name == budget {
			return s.scaling, true
		}
	}
	return 0, false
}

// Resolver returns the resolver of the configuration's scaled budgets:
// its tiers and plans, and the Subjects of the Options it was loaded with.
func (c *Config) Resolver() *Resolver { return c.resolver }

// LayerNames returns the names of the declared layers, in document order.
func (c *Config) LayerNames() []string {
	out := make([]string, len(c.layers))
	for i, l := range c.layers {
		out[i] = l.name
	}
	return out
}

// LayerOptions returns the core.LayerOption values of the named layer:
// core.Use with its budgets, and its costs.
func (c *Config) LayerOptions(name string) ([]core.LayerOption, bool) {
	for _, l := range c.layers {
		if l.name == name {
			opts := []core.LayerOption{core.Use(l.use...), core.Cost(l.cost)}
			for _, b := range l.use {
				if n, ok := l.costs[b]; ok {
					opts = append(opts, core.CostOf(b, n))
				}
			}
			return opts, true
		}
	}
	return nil, false
}

// Layer creates the named layer on eng, with extra options (a denial
// renderer, a header style, cost functions) after the declared ones.
func (c *Config) Layer(eng *core.Engine, name string, extra ...core.LayerOption) (*core.Layer, error) {
	opts, ok := c.LayerOptions(name)
	if !ok {
		return nil, fmt.Errorf("policy: %s declares no layer %q", c.file, name)
	}
	return eng.Layer(append(opts, extra...)...)
}

// sameLayers reports whether c and o declare the same layers.
func (c *Config) sameLayers(o *Config) (string, bool) {
	if len(c.layers) != len(o.layers) {
		return "the set of layers", false
	}
	for i, l := range c.layers {
		m := o.layers[i]
		if l.name != m.name || !slices.Equal(l.use, m.use) || l.cost != m.cost || len(l.costs) != len(m.costs) {
			return fmt.Sprintf("layer %q", l.name), false
		}
		for k, v := range l.costs {
			if w, ok := m.costs[k]; !ok || w != v {
				return fmt.Sprintf("layer %q", l.name), false
			}
		}
	}
	return "", true
}

// ---- decoding ----

type decoder struct {
	file     string
	json     bool
	opts     Options
	resolver *Resolver
	probs    []*Problem
}

func (d *decoder) bad(at where, err error) {
	d.probs = append(d.probs, &Problem{File: d.file, Line: at.line, Column: at.col, Path: at.path, Err: err})
}

func (d *decoder) badf(at where, format string, args ...any) {
	d.bad(at, fmt.Errorf(format, args...))
}

// isMap checks that n is a mapping.
func (d *decoder) isMap(n *node, what string) bool {
	if n.kind != kindMap {
		d.badf(n.at, "%s must be a mapping, not %s", what, n.kind)
		return false
	}
	return true
}

// fields checks that n is a mapping whose keys are all in allowed.
func (d *decoder) fields(n *node, what string, allowed ...string) bool {
	if !d.isMap(n, what) {
		return false
	}
	for _, k := range n.keys {
		if !slices.Contains(allowed, k.text) {
			msg := fmt.Sprintf("unknown field %q in %s", k.text, what)
			if s := suggest(k.text, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.bad(k.at, errors.New(msg))
		}
	}
	return true
}

// onceper keeps the first problem of each bad environment variable: a
// variable several values read is reported once, at its first use.
func onceper(probs []*Problem) []*Problem {
	seen := map[string]bool{}
	out := probs[:0:0]
	for _, p := range probs {
		var ee *EnvError
		if errors.As(p.Err, &ee) {
			if seen[ee.Var] {
				continue
			}
			seen[ee.Var] = true
		}
		out = append(out, p)
	}
	return out
}

// val is a scalar read from the document or from the environment.
type val struct {
	text string
	at   where
	env  string // the variable it came from, if any
}

// fail reports that v is invalid, naming the variable it came from.
func (d *decoder) fail(v val, err error) {
	if v.env != "" {
		err = &EnvError{Var: v.env, Value: v.text, Err: err}
	}
	d.bad(v.at, err)
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0) {
			return false
		}
	}
	return true
}

// scalar resolves n to a scalar: a plain value, or an environment
// reference {env: NAME, default: VALUE} (default optional).
func (d *decoder) scalar(n *node, what string) (val, bool) {
	switch n.kind {
	case kindScalar:
		return val{text: n.text, at: n.at}, true
	case kindMap:
		if n.field("env") == nil {
			d.badf(n.at, "%s must be a value or {env: NAME, default: VALUE}, not a mapping without env", what)
			return val{}, false
		}
		d.fields(n, "an environment reference", "env", "default")
		en := n.field("env")
		if en.kind != kindScalar || !validEnvName(en.text) {
			d.badf(en.at, "env must name an environment variable (letters, digits and _)")
			return val{}, false
		}
		def := n.field("default")
		if def != nil && def.kind != kindScalar {
			d.badf(def.at, "the default of %s must be a plain value, not %s", what, def.kind)
			return val{}, false
		}
		v, set := d.opts.Env(en.text)
		switch {
		case set && strings.TrimSpace(v) == "":
			d.bad(n.at, &EnvError{Var: en.text, Value: v, Err: fmt.Errorf("is set but empty; unset it to use the default, or give %s", what)})
			return val{}, false
		case set:
			return val{text: strings.TrimSpace(v), at: n.at, env: en.text}, true
		case def != nil:
			return val{text: def.text, at: def.at}, true
		}
		d.bad(n.at, &EnvError{Var: en.text, Err: fmt.Errorf("is not set and %s has no default", what)})
		return val{}, false
	case kindNull:
		d.badf(n.at, "%s is empty", what)
	default:
		d.badf(n.at, "%s must be a value, not %s", what, n.kind)
	}
	return val{}, false
}

func (d *decoder) integer(n *node, what string, lo, hi int64) (int64, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseInt(v.text, 10, 64)
	switch {
	case err != nil:
		d.fail(v, fmt.Errorf("%s %q is not a whole number", what, v.text))
		return 0, false
	case x < lo:
		d.fail(v, fmt.Errorf("%s %d is below %d", what, x, lo))
		return 0, false
	case x > hi:
		d.fail(v, fmt.Errorf("%s %d exceeds %d", what, x, hi))
		return 0, false
	}
	return x, true
}

func (d *decoder) duration(n *node, what string) (time.Duration, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return 0, false
	}
	x, err := time.ParseDuration(v.text)
	switch {
	case err != nil:
		d.fail(v, fmt.Errorf("%s %q is not a duration with a unit, such as 500ms, 60s or 1m", what, v.text))
		return 0, false
	case x <= 0:
		d.fail(v, fmt.Errorf("%s %v is not positive", what, x))
		return 0, false
	case x%time.Millisecond != 0:
		d.fail(v, fmt.Errorf("%s %v is not a whole number of milliseconds", what, x))
		return 0, false
	}
	return x, true
}

func (d *decoder) boolean(n *node, what string) (bool, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return false, false
	}
	switch v.text {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	d.fail(v, fmt.Errorf("%s %q must be true or false", what, v.text))
	return false, false
}

func (d *decoder) name(n *node, what string) (string, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return "", false
	}
	if v.text == "" {
		d.fail(v, fmt.Errorf("%s is empty", what))
		return "", false
	}
	return v.text, true
}

// keyFunc resolves a key function name.
func (d *decoder) keyFunc(n *node, what string) (string, core.KeyFunc, bool) {
	v, ok := d.scalar(n, what)
	if !ok {
		return "", nil, false
	}
	if fn := d.opts.Keys[v.text]; fn != nil {
		return v.text, fn, true
	}
	names := make([]string, 0, len(d.opts.Keys))
	for k, fn := range d.opts.Keys {
		if fn != nil {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	msg := fmt.Sprintf("unknown key function %q", v.text)
	if s := suggest(v.text, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if len(names) == 0 {
		msg += "; no key functions were given (Options.Keys)"
	} else {
		msg += "; known: " + strings.Join(names, ", ")
	}
	d.fail(v, errors.New(msg))
	return "", nil, false
}

func (d *decoder) config(root *node) *Config {
	cfg := &Config{file: d.file}
	if root.kind != kindMap {
		d.badf(root.at, "the configuration must be a mapping with a budgets field, not %s", root.kind)
		return cfg
	}
	d.fields(root, "the configuration", "budgets", "tiers", "tier_fallback", "plans", "layers")
	tiers, tiersAt := d.tiers(root)
	plans, planRefs := d.plans(root)
	cfg.resolver = &Resolver{Tiers: tiers, Plans: plans, Subjects: d.opts.Subjects}
	d.resolver = cfg.resolver

	bn := root.field("budgets")
	if bn == nil {
		d.badf(root.at, "no budgets: add a budgets mapping (name: {quota, window, key, ...})")
		return cfg
	}
	if d.isMap(bn, "budgets") {
		if len(bn.keys) == 0 {
			d.badf(bn.at, "budgets is empty")
		}
		for i, k := range bn.keys {
			cfg.budgets = append(cfg.budgets, d.budget(k, bn.vals[i], cfg.resolver, tiersAt))
		}
	}
	byName := map[string]*budgetSpec{}
	for _, s := range cfg.budgets {
		byName[s.b.Name] = s
	}
	for _, ref := range planRefs {
		s, ok := byName[ref.budget]
		switch {
		case !ok:
			d.badf(ref.at, "plan %q raises budget %q, which is not defined", ref.plan, ref.budget)
		case !s.ok:
			// The budget's own problems are reported already.
		case s.scaling != PlanScaled:
			d.badf(ref.at, "plan %q raises budget %q, whose scaling is %s, not plan", ref.plan, ref.budget, s.scaling)
		}
	}
	d.checkScaled(cfg)
	if ln := root.field("layers"); ln != nil && d.isMap(ln, "layers") {
		for i, k := range ln.keys {
			if l := d.layer(k, ln.vals[i], byName); l != nil {
				cfg.layers = append(cfg.layers, l)
			}
		}
		d.checkLayers(cfg)
	}
	return cfg
}

func (d *decoder) tiers(root *node) (*Tiers, *where) {
	tn := root.field("tiers")
	fb := root.field("tier_fallback")
	if tn == nil {
		if fb != nil {
			d.badf(fb.at, "tier_fallback is set but no tiers are defined")
		}
		return nil, nil
	}
	if !d.isMap(tn, "tiers") {
		return nil, nil
	}
	if len(tn.keys) == 0 {
		d.badf(tn.at, "tiers is empty")
		return nil, nil
	}
	before := len(d.probs)
	var list []Tier
	var top *node
	upTo := map[int64]string{}
	names := map[string]bool{}
	for i, k := range tn.keys {
		v := tn.vals[i]
		names[k.text] = true
		what := fmt.Sprintf("tier %q", k.text)
		if !d.fields(v, what, "share", "up_to", "pinned_only") {
			continue
		}
		t := Tier{Name: k.text}
		if sn := v.field("share"); sn == nil {
			d.badf(k.at, "%s has no share (e.g. share: 25%%)", what)
		} else if sv, ok := d.scalar(sn, "share"); ok {
			sh, err := ParseShare(sv.text)
			if n, ierr := strconv.ParseInt(sv.text, 10, 64); ierr == nil && n > 1 {
				err = fmt.Errorf("share %q is ambiguous: write %d%% for a percentage, or %d/1 for %d times the reference", sv.text, n, n, n)
			}
			if err != nil {
				d.fail(sv, err)
			}
			t.Share = sh
		}
		if pn := v.field("pinned_only"); pn != nil {
			t.PinnedOnly, _ = d.boolean(pn, "pinned_only")
		}
		if un := v.field("up_to"); un != nil {
			n, ok := d.integer(un, "up_to", 0, core.MaxQuota)
			switch {
			case !ok:
			case t.PinnedOnly:
				d.badf(un.at, "%s is pinned_only, so it is never derived and takes no up_to", what)
			case n == 0:
				d.badf(un.at, "up_to 0: leave up_to out for the top tier (caps above every other tier, and no cap)")
			default:
				if other, dup := upTo[n]; dup {
					d.badf(un.at, "%s has the same up_to %d as tier %q", what, n, other)
				}
				upTo[n] = k.text
				t.UpTo = n
			}
		} else if !t.PinnedOnly {
			if top != nil {
				d.badf(k.at, "%s and tier %q both have no up_to; only the top tier (caps above every other, and no cap) may leave it out", what, top.text)
			}
			top = k
		}
		list = append(list, t)
	}
	fallback := ""
	if fb != nil {
		if v, ok := d.scalar(fb, "tier_fallback"); ok {
			if !names[v.text] {
				d.fail(v, fmt.Errorf("tier_fallback %q is not a defined tier", v.text))
			} else {
				fallback = v.text
			}
		}
	}
	if len(d.probs) > before {
		return nil, &tn.at
	}
	t, err := NewTiers(list, fallback)
	if err != nil {
		d.bad(tn.at, err)
		return nil, &tn.at
	}
	return t, &tn.at
}

type planRef struct {
	plan, budget string
	at           where
}

func (d *decoder) plans(root *node) (*Plans, []planRef) {
	pn := root.field("plans")
	if pn == nil || !d.isMap(pn, "plans") {
		return nil, nil
	}
	m := map[string]map[string]int64{}
	var refs []planRef
	for i, k := range pn.keys {
		v := pn.vals[i]
		if v.kind != kindMap {
			d.badf(v.at, "plan %q must map budget names to increases (email_send: 500), not %s", k.text, v.kind)
			continue
		}
		incs := map[string]int64{}
		for j, bk := range v.keys {
			if n, ok := d.integer(v.vals[j], fmt.Sprintf("the increase of plan %q for %q", k.text, bk.text), 0, core.MaxQuota); ok {
				incs[bk.text] = n
			}
			refs = append(refs, planRef{plan: k.text, budget: bk.text, at: bk.at})
		}
		m[k.text] = incs
	}
	p, err := NewPlans(m)
	if err != nil {
		d.bad(pn.at, err)
		return nil, refs
	}
	return p, refs
}

var budgetFields = []string{"algorithm", "quota", "window", "burst", "max_wait", "key", "key_class",
	"missing_key", "fallback_key", "ignore_methods", "scaling", "subject", "shadow", "failure_mode", "lease", "description"}

func (d *decoder) budget(k, n *node, res *Resolver, tiersAt *where) *budgetSpec {
	s := &budgetSpec{at: k.at}
	s.b.Name = k.text
	before := len(d.probs)
	if !d.fields(n, fmt.Sprintf("budget %q", k.text), budgetFields...) {
		return s
	}
	b := &s.b
	if an := n.field("algorithm"); an != nil {
		if v, ok := d.scalar(an, "algorithm"); ok {
			a, err := core.ParseAlgorithm(v.text)
			if err != nil {
				d.fail(v, err)
			}
			b.Algorithm = a
		}
	}
	isBucket := b.Algorithm == core.TokenBucket || b.Algorithm == core.LeakyBucket
	if qn := n.field("quota"); qn == nil {
		d.badf(k.at, "budget %q has no quota", k.text)
	} else {
		b.Quota, _ = d.integer(qn, "quota", 1, core.MaxQuota)
	}
	if wn := n.field("window"); wn == nil {
		d.badf(k.at, "budget %q has no window (e.g. window: 1m)", k.text)
	} else {
		b.Window, _ = d.duration(wn, "window")
	}
	if bn := n.field("burst"); bn != nil {
		if x, ok := d.integer(bn, "burst", 1, core.MaxQuota); ok {
			if !isBucket {
				d.badf(bn.at, "burst applies to token_bucket and leaky_bucket only, not %s", b.Algorithm)
			}
			b.Burst = x
		}
	}
	mw := n.field("max_wait")
	if mw != nil {
		if x, ok := d.duration(mw, "max_wait"); ok {
			if b.Algorithm != core.LeakyBucket {
				d.badf(mw.at, "max_wait applies to leaky_bucket only, not %s", b.Algorithm)
			}
			b.MaxWait = x
		}
	} else if b.Algorithm == core.LeakyBucket {
		d.badf(k.at, "budget %q is a leaky_bucket and needs max_wait (how long a request may wait for its slot)", k.text)
	}
	keyName := ""
	if kn := n.field("key"); kn == nil {
		d.badf(k.at, "budget %q has no key (the key function's name, e.g. key: tenant)", k.text)
	} else {
		keyName, b.Key, _ = d.keyFunc(kn, "key")
	}
	b.KeyClass = keyName
	if kc := n.field("key_class"); kc != nil {
		b.KeyClass, _ = d.name(kc, "key_class")
	}
	mk := n.field("missing_key")
	if mk != nil {
		if v, ok := d.scalar(mk, "missing_key"); ok {
			switch v.text {
			case "deny":
				b.MissingKey = core.MissingKeyDeny
			case "skip":
				b.MissingKey = core.MissingKeySkip
			case "fallback":
				b.MissingKey = core.MissingKeyFallback
			default:
				d.fail(v, fmt.Errorf("missing_key %q: want deny, skip or fallback", v.text))
			}
		}
	}
	if fk := n.field("fallback_key"); fk != nil {
		if _, fn, ok := d.keyFunc(fk, "fallback_key"); ok {
			if b.MissingKey != core.MissingKeyFallback {
				d.badf(fk.at, "fallback_key is set but missing_key is not fallback")
			}
			b.FallbackKey = fn
		}
	} else if b.MissingKey == core.MissingKeyFallback && mk != nil {
		d.badf(mk.at, "missing_key is fallback but no fallback_key is set")
	}
	if im := n.field("ignore_methods"); im != nil {
		b.IgnoreMethods = d.methods(im)
	}
	if sn := n.field("shadow"); sn != nil {
		b.Shadow, _ = d.boolean(sn, "shadow")
	}
	if fm := n.field("failure_mode"); fm != nil {
		if v, ok := d.scalar(fm, "failure_mode"); ok {
			switch v.text {
			case "inherit":
				b.FailureMode = core.FailInherit
			case "open":
				b.FailureMode = core.FailOpen
			case "closed":
				b.FailureMode = core.FailClosed
			case "local":
				b.FailureMode = core.FailLocal
			default:
				d.fail(v, fmt.Errorf("failure_mode %q: want inherit, open, closed or local", v.text))
			}
		}
	}
	if ln := n.field("lease"); ln != nil {
		d.lease(ln, b)
	}
	sc := n.field("scaling")
	if sc != nil {
		if v, ok := d.scalar(sc, "scaling"); ok {
			x, err := ParseScaling(v.text)
			if err != nil {
				d.fail(v, err)
			}
			s.scaling = x
			switch {
			case x == TierScaled && tiersAt == nil:
				d.badf(sc.at, "scaling is tier but no tiers are defined (tiers: {small: {share: 25%%, up_to: 100}, ...})")
			case x != Flat && d.opts.Subjects == nil:
				d.badf(sc.at, "scaling is %s, which looks up each key's subject, but no subject lookup was given (Options.Subjects)", x)
			}
		}
	}
	if sj := n.field("subject"); sj != nil {
		if _, fn, ok := d.keyFunc(sj, "subject"); ok {
			if s.scaling == Flat {
				d.badf(sj.at, "subject applies to tier and plan scaling only; this budget is flat")
			}
			s.subject = fn
		}
	}
	s.ok = len(d.probs) == before
	if s.ok {
		if err := validateBudget(*b); err != nil {
			d.bad(k.at, err)
			s.ok = false
		}
	}
	if s.ok && s.scaling != Flat {
		b.QuotaFunc = res.QuotaFunc(b.Name, s.scaling, b.Quota, s.subject)
	}
	return s
}

var standardMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

func (d *decoder) methods(n *node) []string {
	if n.kind != kindSeq {
		d.badf(n.at, "ignore_methods must be a list of methods ([GET, HEAD, OPTIONS]), not %s", n.kind)
		return nil
	}
	var out []string
	for _, it := range n.items {
		v, ok := d.scalar(it, "a method")
		if !ok {
			continue
		}
		m := v.text
		switch {
		case !isToken(m):
			d.fail(v, fmt.Errorf("%q is not a method name", m))
		case m != strings.ToUpper(m) && slices.Contains(standardMethods, strings.ToUpper(m)):
			d.fail(v, fmt.Errorf("methods are case-sensitive: %q never matches; write %q", m, strings.ToUpper(m)))
		case slices.Contains(out, m):
			d.fail(v, fmt.Errorf("method %q is listed twice", m))
		default:
			out = append(out, m)
		}
	}
	return out
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// checkScaled checks that every quota a scaled budget can resolve to
// (each tier's share of the reference, the base plus each plan) is one the
// engine can evaluate.
func (d *decoder) checkScaled(cfg *Config) {
	r := cfg.resolver
	for _, s := range cfg.budgets {
		if !s.ok {
			continue
		}
		check := func(q int64, how string) {
			b := s.b
			b.Quota, b.QuotaFunc = q, nil
			if err := validateBudget(b); err != nil {
				d.badf(s.at, "%s: %v", how, err)
				s.ok = false
			}
		}
		switch s.scaling {
		case TierScaled:
			if r.Tiers == nil {
				continue
			}
			for _, name := range r.Tiers.Names() {
				t, _ := r.Tiers.Get(name)
				q := t.Share.Scale(s.b.Quota)
				check(q, fmt.Sprintf("tier %q (%s) scales quota %d to %d", name, t.Share, s.b.Quota, q))
			}
		case PlanScaled:
			if r.Plans == nil {
				continue
			}
			for name, incs := range r.Plans.m {
				if inc, ok := incs[s.b.Name]; ok {
					q := min(s.b.Quota+inc, core.MaxQuota)
					check(q, fmt.Sprintf("plan %q raises quota %d to %d", name, s.b.Quota, q))
				}
			}
		}
	}
}

// capacity is the largest cost a request can have in s for any key: the
// smallest capacity over the quotas s resolves to without an override.
func (s *budgetSpec) capacity(r *Resolver) int64 {
	lowest := s.b.Quota
	if s.scaling == TierScaled && r.Tiers != nil {
		for _, name := range r.Tiers.Names() {
			t, _ := r.Tiers.Get(name)
			lowest = min(lowest, t.Share.Scale(s.b.Quota))
		}
	}
	switch s.b.Algorithm {
	case core.TokenBucket:
		if s.b.Burst > 0 {
			return s.b.Burst
		}
	case core.LeakyBucket:
		if s.b.Burst > 0 {
			return s.b.Burst
		}
		return 1
	}
	return lowest
}

func (d *decoder) layer(k, n *node, byName map[string]*budgetSpec) *layerSpec {
	what := fmt.Sprintf("layer %q", k.text)
	if !d.fields(n, what, "use", "cost", "costs", "description") {
		return nil
	}
	l := &layerSpec{name: k.text, at: k.at, cost: 1, costs: map[string]int64{}}
	un := n.field("use")
	switch {
	case un == nil:
		d.badf(k.at, "%s has no use list (the budgets it applies)", what)
	case un.kind != kindSeq:
		d.badf(un.at, "use must be a list of budget names, not %s", un.kind)
	case len(un.items) == 0:
		d.badf(un.at, "use is empty")
	case len(un.items) > core.MaxBudgetsPerLayer:
		d.badf(un.at, "%d budgets exceed the maximum of %d per layer", len(un.items), core.MaxBudgetsPerLayer)
	default:
		for _, it := range un.items {
			v, ok := d.scalar(it, "a budget name")
			if !ok {
				continue
			}
			switch {
			case byName[v.text] == nil:
				msg := fmt.Sprintf("unknown budget %q", v.text)
				if s := suggest(v.text, slices.Collect(mapKeys(byName))); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				d.fail(v, errors.New(msg))
			case slices.Contains(l.use, v.text):
				d.fail(v, fmt.Errorf("budget %q is listed twice", v.text))
			default:
				l.use = append(l.use, v.text)
			}
		}
	}
	if cn := n.field("cost"); cn != nil {
		if x, ok := d.integer(cn, "cost", 0, core.MaxQuota); ok {
			l.cost = x
			for _, b := range l.use {
				if _, own := n.field("costs").mapHas(b); !own {
					d.checkCost(cn.at, byName[b], x)
				}
			}
		}
	} else {
		for _, b := range l.use {
			if _, own := n.field("costs").mapHas(b); !own {
				d.checkCost(k.at, byName[b], 1)
			}
		}
	}
	if cs := n.field("costs"); cs != nil {
		if cs.kind != kindMap {
			d.badf(cs.at, "costs must map budget names to costs, not %s", cs.kind)
		} else {
			for i, bk := range cs.keys {
				x, ok := d.integer(cs.vals[i], fmt.Sprintf("the cost in %q", bk.text), 0, core.MaxQuota)
				if !slices.Contains(l.use, bk.text) {
					d.badf(bk.at, "a cost is set for budget %q, which the layer does not use", bk.text)
					continue
				}
				if ok {
					l.costs[bk.text] = x
					d.checkCost(cs.vals[i].at, byName[bk.text], x)
				}
			}
		}
	}
	return l
}

func (n *node) mapHas(key string) (*node, bool) {
	if n == nil || n.kind != kindMap {
		return nil, false
	}
	v := n.field(key)
	return v, v != nil
}

func (d *decoder) checkCost(at where, s *budgetSpec, cost int64) {
	if s == nil || !s.ok {
		return
	}
	if c := s.capacity(d.resolver); cost > c {
		how := "can ever hold"
		if s.scaling == TierScaled {
			how = "holds in its smallest tier"
		}
		d.badf(at, "cost %d in budget %q exceeds what the budget %s (%d)", cost, s.b.Name, how, c)
	}
}

// checkLayers builds every layer on an engine of the configured budgets,
// which reports anything the checks above missed.
func (d *decoder) checkLayers(cfg *Config) {
	for _, s := range cfg.budgets {
		if !s.ok {
			return
		}
	}
	for _, l := range cfg.layers {
		if len(l.use) == 0 {
			return
		}
	}
	eng, err := core.New(core.Config{Store: nopStore{}, Fallback: nopStore{}, Budgets: cfg.Budgets()})
	if err != nil {
		d.badf(where{path: pathRoot(d.json)}, "%v", err)
		return
	}
	for _, l := range cfg.layers {
		opts, _ := cfg.LayerOptions(l.name)
		if _, err := eng.Layer(opts...); err != nil {
			for _, p := range unwrapAll(err) {
				d.bad(l.at, p)
			}
		}
	}
}

func pathRoot(json bool) string {
	if json {
		return "$"
	}
	return ""
}

// validateBudget runs the engine's own validation of b.
func validateBudget(b core.Budget) error {
	_, err := core.New(core.Config{Store: nopStore{}, Fallback: nopStore{}, Budgets: []core.Budget{b}})
	if err == nil {
		return nil
	}
	var msgs []string
	for _, p := range unwrapAll(err) {
		msgs = append(msgs, strings.TrimPrefix(p.Error(), fmt.Sprintf("budget %q: ", b.Name)))
	}
	return errors.New(strings.Join(msgs, "; "))
}

func unwrapAll(err error) []error {
	var ce *core.ConfigError
	if errors.As(err, &ce) {
		return ce.Problems
	}
	return []error{err}
}

// nopStore lets the loader build engines to validate with.
type nopStore struct{}

func (nopStore) Take(context.Context, []core.Item, []core.Outcome) error { return nil }
func (nopStore) Refund(context.Context, []core.Item, []core.Outcome) error {
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// suggest returns the candidate closest to s within an edit distance of 2.
func suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
