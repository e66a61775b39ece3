package core

import (
	"fmt"
	"strings"
)

// This file is a budget's validation ([Budget.Validate]) and the error
// that lists every problem of a configuration ([ConfigError]).

// Validate reports every problem of b that [New] would report, each
// naming the budget, as a *ConfigError; nil when b is valid. Problems that
// depend on the other budgets or on the engine (a name defined twice,
// FailLocal without a fallback store) are left to [ValidateBudgets] and
// New.
func (b Budget) Validate() error {
	return configError(b.validate())
}

// validate reports every problem of b, each a *BudgetProblem.
func (b *Budget) validate() []error {
	p := &budgetProblems{budget: b.Name}
	b.checkName(p)
	b.checkLimit(p)
	b.checkKeys(p)
	if b.FailureMode < FailInherit || b.FailureMode > FailLocal {
		p.bad("failure_mode", -1, "unknown failure mode %d", int(b.FailureMode))
	}
	for i, m := range b.IgnoreMethods {
		if msg := methodProblem(m, b.IgnoreMethods[:i]); msg != "" {
			p.bad("ignore_methods", i, "%s", msg)
		}
	}
	for _, lp := range b.checkLease() {
		p.bad(lp.field, -1, "%s", lp.msg)
	}
	return p.errs
}

// budgetProblems collects the problems of one budget.
type budgetProblems struct {
	budget string
	errs   []error
}

// bad records a problem of field ("" for the budget as a whole), at item
// index of a list field (else -1).
func (p *budgetProblems) bad(field string, index int, format string, args ...any) {
	p.errs = append(p.errs, &BudgetProblem{Budget: p.budget, Field: field, Index: index, Msg: fmt.Sprintf(format, args...)})
}

// checkName reports a name that is empty or not printable ASCII.
func (b *Budget) checkName(p *budgetProblems) {
	if b.Name == "" {
		p.bad("", -1, "name is empty")
	}
	for i := 0; i < len(b.Name); i++ {
		if c := b.Name[i]; c < 0x20 || c > 0x7e {
			p.bad("", -1, "name contains byte 0x%02x; names must be printable ASCII", c)
			break
		}
	}
}

// checkLimit reports the problems of what b counts: the limit's own
// rules, and a burst or max wait that is negative or given to an
// algorithm that takes none.
func (b *Budget) checkLimit(p *budgetProblems) {
	// The limit's own rules, with a negative burst or max wait (reported
	// below) left out of it.
	lb := *b
	lb.Burst, lb.MaxWait = max(lb.Burst, 0), max(lb.MaxWait, 0)
	lim := lb.limitFor(b.Quota)
	for _, e := range lim.problems() {
		p.bad("", -1, "%v", e)
	}
	isBucket := b.Algorithm == TokenBucket || b.Algorithm == LeakyBucket
	if b.Burst < 0 {
		p.bad("burst", -1, "burst %d is negative", b.Burst)
	} else if b.Burst > 0 && !isBucket {
		p.bad("burst", -1, "burst applies to token_bucket and leaky_bucket only, not %s", b.Algorithm)
	}
	if b.Algorithm == LeakyBucket && b.MaxWait <= 0 {
		p.bad("max_wait", -1, "a leaky_bucket needs a positive max_wait (how long a request may wait for its slot)")
	}
	if b.Algorithm != LeakyBucket && b.MaxWait != 0 {
		p.bad("max_wait", -1, "max_wait applies to leaky_bucket only, not %s", b.Algorithm)
	}
	if b.MaxWait < 0 {
		p.bad("max_wait", -1, "max_wait %v is negative", b.MaxWait)
	}
}

// checkKeys reports a missing key function, and a missing-key action
// that is unknown or disagrees with the fallback key function.
func (b *Budget) checkKeys(p *budgetProblems) {
	if b.Key == nil {
		p.bad("", -1, "no key function")
	}
	switch b.MissingKey {
	case MissingKeyDeny, MissingKeySkip:
		if b.FallbackKey != nil {
			p.bad("fallback_key", -1, "fallback_key is set but missing_key is not fallback")
		}
	case MissingKeyFallback:
		if b.FallbackKey == nil {
			p.bad("missing_key", -1, "missing_key is fallback but no fallback_key is set")
		}
	default:
		p.bad("missing_key", -1, "unknown missing-key action %d", int(b.MissingKey))
	}
}

// standardMethods are the methods of RFC 9110 (and PATCH).
var standardMethods = [...]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

// methodProblem says what is wrong with m as an ignored method after
// those before it, or "". Methods are case-sensitive (RFC 9110 §9.1), so a
// standard method spelt in lower case would never match a request: it is
// refused rather than silently ignoring nothing; so is a repeat.
func methodProblem(m string, before []string) string {
	if !isToken(m) {
		return fmt.Sprintf("%q is not a method name", m)
	}
	if up := strings.ToUpper(m); up != m {
		for _, s := range standardMethods {
			if s == up {
				return fmt.Sprintf("methods are case-sensitive: %q never matches; write %q", m, up)
			}
		}
	}
	for _, b := range before {
		if b == m {
			return fmt.Sprintf("method %q is listed twice", m)
		}
	}
	return ""
}

// isToken reports whether s is an RFC 9110 token of at most 64 bytes.
func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// BudgetProblem is one problem of a budget's configuration, as [New],
// [Budget.Validate] and [ValidateBudgets] report them (inside a
// *ConfigError). Field names the budget's setting the problem is about, in
// policy-file spelling ("burst", "max_wait", "ignore_methods",
// "missing_key", "fallback_key", "failure_mode", "leasing",
// "leasing.ttl"; a dot descends into a setting), so that a
// loader can point at the line that set it; "" when the problem is the
// budget's as a whole (its algorithm, quota and window together, its
// name, its key). Index is the list item of Field it is about, or -1.
type BudgetProblem struct {
	Budget string
	Field  string
	Index  int
	Msg    string
}

// Error returns the problem naming its budget: budget "a": msg.
func (p *BudgetProblem) Error() string { return fmt.Sprintf("budget %q: %s", p.Budget, p.Msg) }

// ConfigError reports every problem found in a configuration.
type ConfigError struct {
	Problems []error
}

func (e *ConfigError) Error() string {
	var sb strings.Builder
	sb.WriteString("quotagate: invalid configuration")
	for _, p := range e.Problems {
		sb.WriteString("\n\t")
		sb.WriteString(p.Error())
	}
	return sb.String()
}

// Unwrap returns the individual problems, so errors.Is and errors.As see
// each of them.
func (e *ConfigError) Unwrap() []error { return e.Problems }

func configError(problems []error) error {
	if len(problems) == 0 {
		return nil
	}
	return &ConfigError{Problems: problems}
}
