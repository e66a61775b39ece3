package core

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Algorithm selects how a budget counts. The zero value is FixedWindow.
type Algorithm int

const (
	// FixedWindow counts requests in windows aligned to multiples of the
	// window since the Unix epoch (a one-minute window resets at :00). It
	// admits up to quota in each window, so up to 2×quota across a boundary.
	FixedWindow Algorithm = iota
	// SlidingWindow is the sliding window counter: the previous window's
	// count, weighted by the fraction of it the sliding window still covers,
	// plus the current window's count. Computed in whole milliseconds. It
	// is an estimate: a client that spends the quota just before a window
	// boundary regains it gradually over the next window, not at once, but
	// in the worst case fewer than 2×quota pass in one window-long span
	// (exactly 2×quota - ceil(quota/window in ms); storetest.WorstCase).
	// Use SlidingLog for at most quota in any window-long span.
	SlidingWindow
	// SlidingLog keeps one timestamp per admitted request and admits exactly
	// quota in any window-long interval. Its memory grows with the quota,
	// which is capped at MaxSlidingLogQuota.
	SlidingLog
	// TokenBucket is GCRA: a bucket of Burst tokens (Quota when Burst is 0)
	// refilled at Quota per Window, one token every ceil(Window/Quota) µs.
	// In any interval of length L it admits at most Burst + floor(L/T).
	TokenBucket
	// LeakyBucket is GCRA used for shaping: a request that would be denied
	// is admitted with a Delay when its slot comes within MaxWait; the
	// adapter waits that long before calling the handler. Burst defaults to
	// 1, so admitted requests are spaced by Window/Quota.
	LeakyBucket
	// Concurrency counts requests in flight instead of arrivals: a request
	// takes Cost slots of the key's Quota when it is admitted and gives them
	// back when it finishes (the adapters do so when the handler returns,
	// panics included; a direct caller of Layer.Decide calls
	// Decision.Done). Window is the lease: in a store shared by several
	// instances (Redis), a slot not given back within Window is reclaimed,
	// so the slots of an instance that died come back within Window; a
	// request still running then no longer holds its slot. Set Window
	// longer than the longest request it guards. The memory store, which
	// dies with its process, never reclaims a slot. Quota is at most
	// MaxConcurrencyQuota. See the package documentation, Concurrency.
	Concurrency
)

var algorithmNames = [...]string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "concurrency"}

// String returns the algorithm's configuration name, e.g. "fixed_window".
func (a Algorithm) String() string { return enumString(a, algorithmNames[:], "Algorithm") }

// ParseAlgorithm returns the algorithm named s ("fixed_window",
// "sliding_window", "sliding_log", "token_bucket", "leaky_bucket" or
// "concurrency"; "gcra" is accepted for token_bucket, "in_flight" for
// concurrency).
func ParseAlgorithm(s string) (Algorithm, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fixed_window", "fixed":
		return FixedWindow, nil
	case "sliding_window", "sliding_window_counter", "sliding":
		return SlidingWindow, nil
	case "sliding_log", "sliding_window_log":
		return SlidingLog, nil
	case "token_bucket", "gcra":
		return TokenBucket, nil
	case "leaky_bucket", "shaping":
		return LeakyBucket, nil
	case "concurrency", "in_flight":
		return Concurrency, nil
	}
	return 0, fmt.Errorf("unknown algorithm %q (want fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or concurrency)", s)
}

// MissingKey says what a budget does with a request its key function cannot
// key (it returned an error).
type MissingKey int

const (
	// MissingKeyDeny refuses the request with ReasonNoKey (401 or 400 by default)
	// before anything is charged. It is the default: a request nobody can
	// be held accountable for is never silently unlimited.
	MissingKeyDeny MissingKey = iota
	// MissingKeySkip leaves the budget out of this request's decision
	// when the request carries no key. A request whose key is garbled
	// (an error wrapping [ErrBadKey]: malformed, over-long, repeated) is
	// denied instead, as with MissingKeyDeny. Use it only when another
	// budget limits keyless requests.
	MissingKeySkip
	// MissingKeyFallback keys the request with the budget's FallbackKey
	// (for example the client IP when there is no tenant); if that fails
	// too, the request is denied as with MissingKeyDeny. Fallback keys are
	// counted apart from primary keys (they carry a prefix of their own),
	// so an IP never shares a budget with a tenant of the same spelling.
	MissingKeyFallback
)

var missingKeyNames = [...]string{"deny", "skip", "fallback"}

// String returns the action's configuration name: "deny", "skip" or
// "fallback".
func (m MissingKey) String() string { return enumString(m, missingKeyNames[:], "MissingKey") }

// ParseMissingKey returns the missing-key action named s: "deny", "skip" or
// "fallback", as [MissingKey.String] writes them.
func ParseMissingKey(s string) (MissingKey, error) {
	return parseEnum[MissingKey](s, missingKeyNames[:], "missing-key action")
}

// enumString returns the name of v, or Type(v) for a value without one.
func enumString[T ~int](v T, names []string, typ string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, int(v))
}

// parseEnum returns the value named s, or an error listing the names.
func parseEnum[T ~int](s string, names []string, what string) (T, error) {
	if i := slices.Index(names, s); i >= 0 {
		return T(i), nil
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return 0, fmt.Errorf("unknown %s %q (want %s)", what, s, want)
}

// FailureMode says what happens to a budget when the store cannot evaluate
// it (an error, a timeout, an open circuit breaker).
type FailureMode int

const (
	// FailInherit uses the engine's FailureMode (FailOpen unless set).
	FailInherit FailureMode = iota
	// FailOpen lets the request through and reports the error.
	FailOpen
	// FailClosed denies the request with ReasonUnavailable (503 with
	// Retry-After by default). Use it for login, OTP and password reset,
	// where an outage must not unlock brute force.
	FailClosed
	// FailLocal evaluates the budget on the engine's Fallback store (an
	// in-memory store per instance) while the main store is unavailable.
	FailLocal
)

var failureModeNames = [...]string{"inherit", "open", "closed", "local"}

// String returns the mode's configuration name: "inherit", "open",
// "closed" or "local".
func (m FailureMode) String() string { return enumString(m, failureModeNames[:], "FailureMode") }

// ParseFailureMode returns the failure mode named s: "inherit", "open",
// "closed" or "local", as [FailureMode.String] writes them.
func ParseFailureMode(s string) (FailureMode, error) {
	return parseEnum[FailureMode](s, failureModeNames[:], "failure mode")
}

// MaxQuota is the largest quota, burst or cost a budget accepts: the
// largest Integer an RFC 9651 structured field can carry.
const MaxQuota = 999_999_999_999_999

// MaxSlidingLogQuota is the largest quota of a SlidingLog budget; the log
// keeps up to quota entries per key.
const MaxSlidingLogQuota = 100_000

// MaxConcurrencyQuota is the largest quota of a Concurrency budget: the
// Redis store keeps one entry per slot held.
const MaxConcurrencyQuota = 100_000

// maxExact is 2^53: the Redis store computes in Lua doubles, which are exact
// integers up to this bound, so every product the algorithms form must stay
// below it.
const maxExact = 1 << 53

// maxSpan bounds a bucket's burst×interval, a max wait and a window (µs):
// 2^50 µs, about 35 years. GCRA forms times up to now + 2×burst×interval +
// max wait, which stays below maxExact while now < 2^52 µs (the year 2112).
// The Redis store's take script checks the window against the same bound
// (MAXW in take.lua).
const maxSpan = 1 << 50

// Budget is a named limit. Budgets are given to [New] by value; the engine
// keeps its own copy, validated once.
type Budget struct {
	// Name identifies the budget in layers, headers, metrics and store keys,
	// e.g. "t_mutate". Printable ASCII (0x20-0x7E), unique per engine.
	Name string
	// Algorithm selects the counting method; the zero value is FixedWindow.
	Algorithm Algorithm
	// Quota is how many units a key may spend per Window (the reference
	// quota when QuotaFunc is set). Must be positive.
	Quota int64
	// Window is the period the quota applies to: a positive whole number of
	// milliseconds. For Concurrency it is the lease of a slot instead (see
	// Concurrency).
	Window time.Duration
	// Burst is the bucket capacity of TokenBucket (default Quota) and
	// LeakyBucket (default 1) budgets. Other algorithms must leave it 0.
	Burst int64
	// MaxWait is how long a LeakyBucket request may wait for its slot.
	// Required (positive) for LeakyBucket, 0 for the others.
	MaxWait time.Duration
	// Key derives the partition key. Required.
	Key KeyFunc
	// KeyClass names the kind of key for observers and metrics ("ip",
	// "tenant", ...). Keys themselves are never reported. Default "custom".
	KeyClass string
	// MissingKey says what happens when Key fails. Default MissingKeyDeny.
	MissingKey MissingKey
	// FallbackKey keys requests Key cannot, when MissingKey is
	// MissingKeyFallback.
	FallbackKey KeyFunc
	// IgnoreMethods lists methods this budget neither evaluates, charges
	// nor reports, e.g. GET, HEAD and OPTIONS for a write budget. Methods
	// are case-sensitive (RFC 9110): each must be a method token, a
	// standard method in upper case, and listed once; New reports any
	// other spelling rather than let it silently match nothing.
	IgnoreMethods []string
	// QuotaFunc, when set, resolves the quota per request and key (tier
	// scaling, plans, overrides); Quota is then the fallback used when it
	// fails. A changed quota takes effect at the next request: stored state
	// never embeds the quota.
	QuotaFunc QuotaFunc
	// Shadow makes the budget evaluate and count but never deny; what it
	// would have denied is reported in the Result and to the observer.
	Shadow bool
	// FailureMode overrides the engine's failure mode for this budget.
	FailureMode FailureMode
	// Leasing lets a shared store lease slices of a hot key's budget to an
	// instance, which spends them locally (see [Leasing]). Off by default.
	Leasing Leasing
	// Scale, when set, lowers the budget's quota for every key by the
	// factor it reports (see [Scaler]), on top of what QuotaFunc resolved:
	// quotas that follow load or a schedule (package core/scale). It is
	// read at every request, so a new scale takes effect at the next
	// request; what a key already spent stays spent.
	Scale Scaler
}

// A Scaler gives a budget's scale: the factor, in (0, 1], that its quota
// is multiplied by now. The scaled quota is floor(quota × factor), at
// least 1; a TokenBucket's burst is scaled with it (its rate and its
// capacity fall together), a LeakyBucket's rate is (its burst, the
// requests it queues, is kept), and a Concurrency budget's slots are. A
// factor of 1 or more, or one that is not a number, leaves the budget
// as it is: a scale lowers a quota and never raises it.
//
// Scale is called on every request that evaluates the budget, so it must
// be quick and safe for concurrent use; package core/scale's Controller
// reads one atomic value.
type Scaler interface {
	Scale() float64
}

// scaleLimit returns l with its quota multiplied by factor f (see
// [Scaler]).
func scaleLimit(l Limit, f float64) Limit {
	if !(f < 1) {
		return l
	}
	scale := func(n int64) int64 {
		if !(f > 0) {
			return 1
		}
		return max(1, int64(float64(n)*f))
	}
	l.Quota = scale(l.Quota)
	if l.Algorithm == TokenBucket {
		l.Burst = scale(l.Burst)
	}
	return l
}

// Limit is a budget's algorithm and parameters, resolved for one key: what a
// [Store] needs to evaluate it.
type Limit struct {
	Algorithm Algorithm
	Quota     int64
	Window    time.Duration
	// Burst is the effective bucket capacity for TokenBucket and
	// LeakyBucket (never 0 here); 0 for the other algorithms.
	Burst int64
	// MaxWait is the LeakyBucket shaping bound; 0 for the others.
	MaxWait time.Duration
	// Leasing is the budget's [Leasing], with its default TTL filled in; the
	// zero Leasing when leasing is off.
	Leasing Leasing
}

// Capacity is the largest cost a single request can ever have under l: the
// burst for bucket algorithms, the quota otherwise.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket {
		return l.Burst
	}
	return l.Quota
}

// Interval is the GCRA emission interval ceil(Window/Quota) in microseconds
// for bucket algorithms, or 0.
func (l Limit) Interval() int64 {
	if l.Algorithm != TokenBucket && l.Algorithm != LeakyBucket {
		return 0
	}
	return ceilDiv(l.Window.Microseconds(), l.Quota)
}

// limitFor returns the Limit of budget b when its quota resolves to q.
func (b *Budget) limitFor(q int64) Limit {
	l := Limit{Algorithm: b.Algorithm, Quota: q, Window: b.Window, Leasing: b.leaseFor()}
	switch b.Algorithm {
	case TokenBucket:
		l.Burst = b.Burst
		if l.Burst == 0 {
			l.Burst = q
		}
	case LeakyBucket:
		l.Burst = b.Burst
		if l.Burst == 0 {
			l.Burst = 1
		}
		l.MaxWait = b.MaxWait
	}
	return l
}

// Validate reports why a store cannot evaluate l exactly, or nil. It is
// the one definition of a valid limit: [New] checks every budget's limit
// with it, the engine checks a resolved quota's limit with it before
// using it, and both stores check every item of a Take or Refund with it
// (through [Item.Validate]). The rules:
//
//   - Algorithm is one of the five algorithms;
//   - 1 <= Quota <= MaxQuota;
//   - Window is a positive whole number of milliseconds, at most 2^50 µs
//     (about 35 years);
//   - SlidingWindow: 2×Quota×(Window in ms) stays below 2^53;
//   - SlidingLog: Quota <= MaxSlidingLogQuota;
//   - TokenBucket and LeakyBucket: at most one unit per microsecond
//     (Quota <= Window in µs), 1 <= Burst <= MaxQuota, Burst×Interval and
//     MaxWait (not negative) at most 2^50 µs.
//
// Burst and MaxWait are not read for the other algorithms. These bounds
// keep every value the algorithms form an exact integer in the Redis
// store's Lua doubles. When several rules are broken, the error is the
// first one's.
func (l Limit) Validate() error {
	if p := l.problems(); len(p) > 0 {
		return p[0]
	}
	return nil
}

// problems lists every rule of [Limit.Validate] that l breaks.
func (l *Limit) problems() []error {
	var errs []error
	if l.Algorithm < FixedWindow || l.Algorithm > Concurrency {
		errs = appendf(errs, "unknown algorithm %d", int(l.Algorithm))
	}
	if l.Quota <= 0 {
		errs = appendf(errs, "quota %d is not positive", l.Quota)
	} else if l.Quota > MaxQuota {
		errs = appendf(errs, "quota %d exceeds %d", l.Quota, int64(MaxQuota))
	}
	switch {
	case l.Window <= 0:
		errs = appendf(errs, "window %v is not positive", l.Window)
	case l.Window%time.Millisecond != 0:
		errs = appendf(errs, "window %v is not a whole number of milliseconds", l.Window)
	case l.Window.Microseconds() > maxSpan:
		errs = appendf(errs, "window %v exceeds 2^50 µs", l.Window)
	}
	if len(errs) > 0 {
		return errs // the rules below divide by the quota and the window
	}
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case SlidingWindow:
		if 2*l.Quota > maxExact/(l.Window.Milliseconds()) {
			errs = appendf(errs, "quota %d over %v is too large for the sliding window counter (2×quota×window in ms must stay below 2^53)", l.Quota, l.Window)
		}
	case SlidingLog:
		if l.Quota > MaxSlidingLogQuota {
			errs = appendf(errs, "quota %d exceeds %d, the largest a sliding log keeps; use sliding_window", l.Quota, MaxSlidingLogQuota)
		}
	case Concurrency:
		if l.Quota > MaxConcurrencyQuota {
			errs = appendf(errs, "quota %d exceeds %d, the most slots a concurrency budget holds", l.Quota, MaxConcurrencyQuota)
		}
	case TokenBucket, LeakyBucket:
		if l.Quota > w {
			errs = appendf(errs, "quota %d per %v is more than one unit per microsecond", l.Quota, l.Window)
		}
		// GCRA forms now + 2·burst·T + max wait; keeping burst·T and the
		// wait below 2^50 µs (35 years) keeps that exact in Lua doubles.
		if l.Burst <= 0 || l.Burst > MaxQuota {
			errs = appendf(errs, "burst %d is out of range", l.Burst)
		} else if t := l.Interval(); l.Burst > maxSpan/t {
			errs = appendf(errs, "burst %d with an emission interval of %dµs exceeds 2^50 µs", l.Burst, t)
		}
		if l.MaxWait < 0 {
			errs = appendf(errs, "max wait %v is negative", l.MaxWait)
		} else if l.MaxWait.Microseconds() > maxSpan {
			errs = appendf(errs, "max wait %v exceeds 2^50 µs", l.MaxWait)
		}
	}
	return errs
}

// appendf appends a formatted error to errs.
func appendf(errs []error, format string, args ...any) []error {
	return append(errs, fmt.Errorf(format, args...))
}

// Validate reports why a store cannot evaluate it, or nil: its limit
// breaks a rule of [Limit.Validate], or its cost is negative or above
// what the limit can ever hold (Limit.Capacity). The error names the
// budget. Stores call it on every item they are given.
func (it *Item) Validate() error {
	if it.plainlyValid() {
		return nil
	}
	l := &it.Limit
	if p := l.problems(); len(p) > 0 {
		return fmt.Errorf("budget %q: %w", it.Budget, p[0])
	}
	if it.Cost < 0 || it.Cost > l.Capacity() {
		return fmt.Errorf("budget %q: cost %d is outside 0 to %d, what the budget can hold", it.Budget, it.Cost, it.Limit.Capacity())
	}
	return nil
}

// plainlyValid is Validate's fast path, which every take goes through: it
// reports true only for a fixed window or concurrency item that breaks no
// rule, and false for every other item, which Validate then checks rule by
// rule (FuzzItemValidate holds it to that).
func (it *Item) plainlyValid() bool {
	l := &it.Limit
	q := MaxQuota
	switch l.Algorithm {
	case FixedWindow:
	case Concurrency:
		q = MaxConcurrencyQuota
	default:
		return false
	}
	return 0 < l.Quota && l.Quota <= int64(q) &&
		0 < l.Window && l.Window <= maxSpan*time.Microsecond && l.Window%time.Millisecond == 0 &&
		0 <= it.Cost && it.Cost <= l.Quota
}

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

// ConcurrencyRetryAfter is the RetryAfter of a denied [Concurrency] budget.
// No store knows when a slot will free (when a request in flight
// finishes); one second is the smallest Retry-After that HTTP can say,
// and most requests guarded by a concurrency budget finish within it.
const ConcurrencyRetryAfter = time.Second

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
