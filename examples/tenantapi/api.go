package tenantapi

import (
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/policy"
	"github.com/quotagate/quotagate/keyfunc"
)

//go:embed policy.yaml
var policyYAML []byte

// Environment variables the API reads at start-up.
const (
	// EnvPublicLimit is each public endpoint's quota per client IP
	// (default 20).
	EnvPublicLimit = "PUBLIC_RATE_LIMIT"
	// EnvPublicWindow is the public endpoints' window, a Go duration
	// (default 1m).
	EnvPublicWindow = "PUBLIC_RATE_WINDOW"
	// EnvZeroLoginLimit is POST /portal/zerologin's quota per client IP
	// per minute (default 120).
	EnvZeroLoginLimit = "PORTAL_ZEROLOGIN_RATE_LIMIT"
	// EnvTrustedProxies lists, comma-separated, the CIDR prefixes of the
	// proxies whose X-Forwarded-For is believed (default none: the client
	// IP is the peer address).
	EnvTrustedProxies = "TRUSTED_PROXIES"
)

// Config configures [New].
type Config struct {
	// Store holds the budgets' state: a memstore.Store for one
	// instance, a redisstore.Store to share budgets between instances.
	// Required.
	Store core.Store
	// Env looks up environment variables. Default os.LookupEnv.
	Env func(name string) (string, bool)
	// Log receives denials, store errors and other limiter events
	// (rate-limited by observe.Logger). Default slog.Default().
	Log *slog.Logger
}

// API is the Tenant API's policy on one engine, with its routes bound to
// their layers. Every main builds one and registers [API.Routes] with its
// router.
type API struct {
	engine *core.Engine
	logger *observe.Logger
	config *policy.Document
	routes []Route
}

// New reads the policy and its environment overrides and builds the
// engine. An invalid environment variable is an error naming it; every
// problem is reported at once.
func New(opts Config) (*API, error) {
	if opts.Store == nil {
		return nil, errors.New("tenantapi: no store")
	}
	env := opts.Env
	if env == nil {
		env = os.LookupEnv
	}
	var problems []error

	// Client IP: the peer address, or X-Forwarded-For from trusted proxies.
	ipCfg := keyfunc.IPConfig{}
	raw, _ := env(EnvTrustedProxies)
	trusted, err := ParseTrustedProxies(raw)
	if err == nil && len(trusted) > 0 {
		ipCfg = keyfunc.IPConfig{TrustedProxies: trusted, Headers: []keyfunc.Source{keyfunc.XForwardedFor}}
	}
	ip, ipErr := keyfunc.IP(ipCfg)
	if err == nil {
		err = ipErr
	}
	if err != nil {
		problems = append(problems, fmt.Errorf("environment variable %s=%q: %w", EnvTrustedProxies, raw, err))
		ip = keyfunc.PeerIP() // keep going, to report every problem
	}

	// Identities, as the authentication middleware stored them.
	tenant := keyfunc.TenantFunc(func(r *core.Request) (string, bool) {
		id, ok := r.Value(identityKey{}).(Identity)
		return id.Tenant, ok
	})
	operator := keyfunc.OperatorFunc(func(r *core.Request) (string, bool) {
		id, ok := r.Value(identityKey{}).(Identity)
		return id.Operator, ok
	})
	subscriber := keyfunc.SubscriberFunc(func(r *core.Request) (string, bool) {
		id, ok := r.Value(identityKey{}).(Identity)
		return id.Subscriber, ok
	})
	subjects, err := policy.NewSubjects(lookupLicence, policy.CacheConfig{})
	if err != nil {
		return nil, err
	}
	cfg, err := policy.Parse("policy.yaml", policyYAML, policy.LoadConfig{
		Keys: map[string]core.KeyFunc{
			"tenant":            tenant,
			"tenant_operator":   keyfunc.Composite(tenant, operator),
			"subscriber":        keyfunc.Composite(tenant, subscriber),
			"ip":                ip,
			"unparsable_client": keyfunc.Constant("unparsable-client"),
		},
		Subjects: subjects,
		Env:      env,
	})
	if err != nil {
		problems = append(problems, configProblems(err)...)
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}

	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	logger, err := observe.NewLogger(opts.Log, observe.LoggerConfig{})
	if err != nil {
		return nil, err
	}
	eng, err := core.New(core.Config{
		Store:    opts.Store,
		Budgets:  cfg.Budgets(),
		Headers:  core.HeadersNone, // the API sends no rate-limit fields
		Deny:     Deny,
		Observer: logger,
		// FailureMode defaults to fail-open: when the store cannot be
		// reached, requests pass and the error is logged.
	})
	if err != nil {
		return nil, err
	}
	a := &API{engine: eng, logger: logger, config: cfg, routes: routes()}
	for i := range a.routes {
		r := &a.routes[i]
		if r.Layer, err = cfg.Layer(eng, r.Budgets); err != nil {
			return nil, fmt.Errorf("route %s %s: %w", r.Method, r.Path, err)
		}
	}
	return a, nil
}

// Routes returns the API's routes, each bound to its layer.
func (a *API) Routes() []Route { return append([]Route(nil), a.routes...) }

// Engine returns the API's engine.
func (a *API) Engine() *core.Engine { return a.engine }

// Logger returns the observer that logs the engine's events; flush it at
// shutdown.
func (a *API) Logger() *observe.Logger { return a.logger }

// ConfigError lists every problem that stopped [New].
type ConfigError struct {
	Problems []error
}

func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return "invalid configuration:\n\t" + strings.Join(msgs, "\n\t")
}

// Unwrap returns the problems.
func (e *ConfigError) Unwrap() []error { return e.Problems }

// configProblems turns the policy loader's error into one problem per
// distinct cause: a bad PUBLIC_RATE_LIMIT is reported once, not once per
// public budget that reads it.
func configProblems(err error) []error {
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		return []error{err}
	}
	var out []error
	seen := map[string]bool{}
	for _, p := range ce.Problems {
		var ee *policy.EnvError
		if errors.As(p, &ee) {
			if !seen[ee.Error()] {
				seen[ee.Error()] = true
				out = append(out, ee)
			}
			continue
		}
		out = append(out, p)
	}
	return out
}

// ParseTrustedProxies splits the value of TRUSTED_PROXIES: CIDR prefixes
// (or single addresses) separated by commas, with optional spaces. An
// empty or blank value means no trusted proxy. An empty entry ("a,,b", a
// trailing comma) is an error; the prefixes themselves are checked by
// keyfunc.IP.
func ParseTrustedProxies(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("entry %d is empty", i+1)
		}
		out = append(out, p)
	}
	return out, nil
}
