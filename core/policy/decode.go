package policy

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
)

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

type decoder struct {
	file     string
	json     bool
	opts     LoadConfig
	resolver *Resolver
	probs    []*Problem
	warns    []*Problem // settings spelled the old way, still read
	assigns  bool       // the document has a subjects section
	tierSet  []string   // the names of the tiers the document declares
}

func (d *decoder) bad(at where, err error) {
	d.probs = append(d.probs, &Problem{File: d.file, Line: at.line, Column: at.col, Path: at.path, Err: err})
}

func (d *decoder) badf(at where, format string, args ...any) {
	d.bad(at, fmt.Errorf(format, args...))
}

// warnf records a warning at at: a setting that is read, but spelled the
// old way.
func (d *decoder) warnf(at where, format string, args ...any) {
	d.warns = append(d.warns, &Problem{File: d.file, Line: at.line, Column: at.col, Path: at.path, Err: fmt.Errorf(format, args...)})
}

// warn logs the warnings, one line each, in document order.
func (d *decoder) warn() {
	if len(d.warns) == 0 {
		return
	}
	logger := d.opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	slices.SortStableFunc(d.warns, func(a, b *Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	for _, w := range d.warns {
		logger.Warn("quotagate: policy: deprecated setting", "warning", w.Error())
	}
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
			d.badf(k.at, "unknown field %q in %s%s", k.text, what, didYouMean(k.text, allowed))
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
	case err != nil && strings.Contains(err.Error(), "invalid duration") && durationShaped(v.text):
		d.fail(v, fmt.Errorf("%s %q is too long: a duration must be under %v", what, v.text, time.Duration(math.MaxInt64)))
		return 0, false
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

// durationShaped reports whether s is digits (with an optional fraction)
// followed by a unit, one or more times: a duration whose only fault can
// be its size.
func durationShaped(s string) bool {
	units := []string{"ns", "us", "µs", "μs", "ms", "s", "m", "h"}
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == 0 {
			return false
		}
		s = s[i:]
		found := false
		for _, u := range units {
			if strings.HasPrefix(s, u) && (len(s) == len(u) || s[len(u)] >= '0' && s[len(u)] <= '9' || s[len(u)] == '.') {
				s, found = s[len(u):], true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
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
	names := slices.DeleteFunc(slices.Sorted(maps.Keys(d.opts.Keys)), func(k string) bool { return d.opts.Keys[k] == nil })
	msg := fmt.Sprintf("unknown key function %q%s", v.text, didYouMean(v.text, names))
	if len(names) == 0 {
		msg += "; no key functions were given (LoadConfig.Keys)"
	} else {
		msg += "; known: " + strings.Join(names, ", ")
	}
	d.fail(v, errors.New(msg))
	return "", nil, false
}

func (n *node) mapHas(key string) (*node, bool) {
	if n == nil || n.kind != kindMap {
		return nil, false
	}
	v := n.field(key)
	return v, v != nil
}

func pathRoot(json bool) string {
	if json {
		return "$"
	}
	return ""
}
