package policy

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
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

// LoadConfig says how to read a configuration.
type LoadConfig struct {
	// Keys are the key functions budgets name in their key, fallback_key
	// and subject fields, for example "ip", "apikey", "tenant",
	// "tenant+operator", "subscriber", "global". A name not in Keys is a
	// configuration error.
	Keys map[string]core.KeyFunc
	// Subjects finds the subject (tier, plan, overrides) of a key the
	// document's subjects section does not list. Required when any budget
	// has quota_by tier or plan and the document assigns no subjects. Keep
	// one Subjects for the life of the process and pass it to every load,
	// so reloads keep the cache.
	Subjects *Subjects
	// Env looks up environment variables. Default os.LookupEnv.
	Env func(name string) (string, bool)
	// Format is the document's syntax. Default FormatAuto.
	Format Format
	// Priorities and Signals are the functions a layer's adaptive section
	// names in its priority and signal fields (see core/adaptive); a
	// budget's scale section names Signals too (see core/scale).
	Priorities map[string]func(*core.Request) adaptive.Priority
	Signals    map[string]func() float64
	// Logger receives a warning for each setting the document spells the
	// old way (a budget's scaling, now quota_by), which is still read, at
	// every load and reload: file:line:column, the old and the new
	// spelling. Default slog.Default(); slog.New(slog.DiscardHandler)
	// turns the lines off.
	Logger *slog.Logger
}

// MaxDocumentSize is the largest configuration document accepted.
const MaxDocumentSize = 4 << 20

// Document is a loaded, validated configuration: budgets ready for
// core.New or core.Engine.Reload, the layers it declares, and the resolver
// of its by-tier and by-plan budgets.
type Document struct {
	file     string
	budgets  []*budgetSpec
	layers   []*layerSpec
	resolver *Resolver
}

// Load reads and validates the configuration file at path.
func Load(path string, opts LoadConfig) (*Document, error) {
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
func Parse(name string, data []byte, opts LoadConfig) (*Document, error) {
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
	if root == nil {
		return nil, problems(probs)
	}
	// The problems of a tree that could be read (keys defined twice) come
	// first, with those the decoder finds.
	d := &decoder{file: name, json: format == FormatJSON, opts: opts, probs: probs}
	if d.opts.Env == nil {
		d.opts.Env = os.LookupEnv
	}
	cfg := d.config(root)
	if len(d.probs) > 0 {
		// In document order, so a reader fixes them top to bottom. (JSON
		// problems have no line, and keep the order they were found in.)
		slices.SortStableFunc(d.probs, func(a, b *Problem) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		d.warn()
		return nil, problems(onceper(d.probs))
	}
	d.warn()
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
func (c *Document) File() string { return c.file }

// Budgets returns the configured budgets, ready for core.Config.Budgets
// or core.Engine.Reload. By-tier and by-plan budgets carry a QuotaFunc
// resolving their quota through the configuration's Resolver; their Quota
// is the reference (tier) or base (plan) quota the engine falls back to.
func (c *Document) Budgets() []core.Budget {
	out := make([]core.Budget, len(c.budgets))
	for i, s := range c.budgets {
		out[i] = s.b
		out[i].IgnoreMethods = slices.Clone(s.b.IgnoreMethods)
	}
	return out
}

// BudgetNames returns the budget names in document order.
func (c *Document) BudgetNames() []string {
	out := make([]string, len(c.budgets))
	for i, s := range c.budgets {
		out[i] = s.b.Name
	}
	return out
}

// QuotaBy returns what the named budget's quota is resolved by (its
// quota_by), and whether the document has the budget.
func (c *Document) QuotaBy(budget string) (QuotaBy, bool) {
	for _, s := range c.budgets {
		if s.b.Name == budget {
			return s.quotaBy, true
		}
	}
	return 0, false
}

// Scaling is the old name of QuotaBy.
//
// Deprecated: use [Document.QuotaBy].
func (c *Document) Scaling(budget string) (QuotaBy, bool) { return c.QuotaBy(budget) }

// Resolver returns the resolver of the configuration's by-tier and by-plan
// budgets: its tiers and plans, and the Subjects of the LoadConfig it was
// loaded with.
func (c *Document) Resolver() *Resolver { return c.resolver }

func (d *decoder) config(root *node) *Document {
	cfg := &Document{file: d.file}
	if root.kind != kindMap {
		d.badf(root.at, "the configuration must be a mapping with a budgets field, not %s", root.kind)
		return cfg
	}
	d.fields(root, "the configuration", "budgets", "tiers", "tier_fallback", "plans", "subjects", "layers")
	d.assigns = root.field("subjects") != nil
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
		case s.quotaBy != ByPlan:
			d.badf(ref.at, "plan %q raises budget %q, whose quota_by is %s, not plan", ref.plan, ref.budget, s.quotaBy)
		}
	}
	d.checkResolved(cfg)
	cfg.resolver.Assigned = d.subjects(root, byName)
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
