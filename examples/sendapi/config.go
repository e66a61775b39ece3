package sendapi

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/quotagate/quotagate/examples/internal/redisflag"
	"github.com/quotagate/quotagate/keyfunc"
)

// Environment variables read by [LoadConfig].
const (
	// EnvKeySecret is the secret access keys are hashed with (HMAC-SHA-256)
	// before they become budget keys or are looked up. At least
	// keyfunc.MinSecretLen bytes. Instances sharing a Redis must use the
	// same secret, or they count the same credential under different keys.
	EnvKeySecret = "SENDAPI_KEY_SECRET"
	// EnvTrustedProxies lists, comma-separated, the proxies (CIDRs or
	// addresses) whose X-Forwarded-For is believed when the auth group
	// keys a request by client IP. Default none: the peer address is the
	// client.
	EnvTrustedProxies = "TRUSTED_PROXIES"
	// EnvIdempotencyTTL is how long a completed Idempotency-Key is
	// replayed, as a Go duration ("24h", "90m"). Default 24h.
	EnvIdempotencyTTL = "IDEMPOTENCY_TTL"
	// EnvRedisTimeout bounds every Redis call, as a Go duration ("50ms").
	// When a call takes longer, the request passes unlimited (fail-open).
	// Default redisstore.DefaultTimeout (50ms); at most 10s.
	EnvRedisTimeout = "REDIS_TIMEOUT"
)

// DefaultKeySecret is the key-hashing secret used when SENDAPI_KEY_SECRET
// is not set. It is public, so it protects nothing: set your own secret in
// any deployment that is not a local trial.
const DefaultKeySecret = "sendapi-example-secret-do-not-deploy"

// DefaultIdempotencyTTL is how long a completed Idempotency-Key is
// replayed unless IDEMPOTENCY_TTL says otherwise.
const DefaultIdempotencyTTL = 24 * time.Hour

// DefaultAddr is the address the commands listen on without -addr.
const DefaultAddr = "127.0.0.1:8080"

// Config is the configuration of a Send API server, from its flags and
// environment.
type Config struct {
	// Addr is the address to listen on (-addr).
	Addr string
	// Redis names the Redis server or cluster (-redis): host:port, a
	// redis:// or rediss:// URL, or a comma-separated list of cluster
	// nodes (see redisstore.ParseAddr); empty means the
	// memory store and an in-memory idempotency store.
	Redis string
	// KeySecret hashes access keys (SENDAPI_KEY_SECRET).
	KeySecret keyfunc.Secret
	// TrustedProxies are the proxies whose X-Forwarded-For is believed
	// (TRUSTED_PROXIES).
	TrustedProxies []string
	// IdempotencyTTL is how long completed idempotency keys are replayed
	// (IDEMPOTENCY_TTL).
	IdempotencyTTL time.Duration
	// RedisTimeout bounds every call to Redis (REDIS_TIMEOUT).
	RedisTimeout time.Duration
}

// LoadConfig reads the command-line arguments (without the program name)
// and the environment, looked up with env (os.LookupEnv in the commands).
// The error names every flag and variable that is wrong; flag usage, when
// asked for with -h, is written to usage, and the error is then
// flag.ErrHelp.
func LoadConfig(name string, args []string, env func(string) (string, bool), usage io.Writer) (Config, error) {
	cfg := Config{IdempotencyTTL: DefaultIdempotencyTTL, RedisTimeout: redisstore.DefaultTimeout}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&cfg.Addr, "addr", DefaultAddr, "address to listen on, host:port")
	fs.StringVar(&cfg.Redis, "redis", "", redisflag.Usage)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", name)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "Environment:\n  %s\n  %s\n  %s\n  %s\n", EnvKeySecret, EnvTrustedProxies, EnvIdempotencyTTL, EnvRedisTimeout)
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	var problems []error
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		problems = append(problems, fmt.Errorf("-addr %q: %v", cfg.Addr, err))
	}
	if cfg.Redis != "" {
		if _, err := redisstore.ParseAddr(cfg.Redis); err != nil {
			problems = append(problems, fmt.Errorf("-redis %s: %v", redisstore.QuoteAddr(cfg.Redis), err))
		}
	}

	cfg.KeySecret = keyfunc.Secret(DefaultKeySecret)
	if v, ok := env(EnvKeySecret); ok {
		if len(v) < keyfunc.MinSecretLen {
			// The value is a secret: never repeat it.
			problems = append(problems, fmt.Errorf("%s: the secret is %d bytes long, want at least %d", EnvKeySecret, len(v), keyfunc.MinSecretLen))
		}
		cfg.KeySecret = keyfunc.Secret(v)
	}
	if v, ok := env(EnvTrustedProxies); ok {
		proxies, err := ParseProxies(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s=%q: %w", EnvTrustedProxies, v, err))
		}
		cfg.TrustedProxies = proxies
	}
	if v, ok := env(EnvIdempotencyTTL); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("%s=%q: not a Go duration (such as 24h or 90m)", EnvIdempotencyTTL, v))
		case d < time.Second:
			problems = append(problems, fmt.Errorf("%s=%q: must be at least 1s", EnvIdempotencyTTL, v))
		default:
			cfg.IdempotencyTTL = d
		}
	}
	if v, ok := env(EnvRedisTimeout); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("%s=%q: not a Go duration (such as 50ms)", EnvRedisTimeout, v))
		case d <= 0 || d > 10*time.Second:
			problems = append(problems, fmt.Errorf("%s=%q: must be more than 0 and at most 10s", EnvRedisTimeout, v))
		default:
			cfg.RedisTimeout = d
		}
	}
	return cfg, errors.Join(problems...)
}

// ParseProxies parses a comma-separated list of CIDR prefixes or single
// addresses ("10.0.0.0/8, 192.0.2.10") as keyfunc.IPConfig.TrustedProxies
// accepts them (no zones). Blank entries are ignored, so an empty list is
// valid and trusts no proxy.
func ParseProxies(s string) ([]string, error) {
	var out, bad []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !validProxy(p) {
			bad = append(bad, p)
			continue
		}
		out = append(out, p)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("not a CIDR or an IP address: %q", bad)
	}
	if len(out) > 0 {
		// The key function is the authority on what it accepts.
		if _, err := keyfunc.NewIPKey(keyfunc.IPConfig{TrustedProxies: out, Headers: []keyfunc.Source{keyfunc.XForwardedFor}}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func validProxy(p string) bool {
	if strings.Contains(p, "/") {
		_, err := netip.ParsePrefix(p)
		return err == nil
	}
	a, err := netip.ParseAddr(p)
	return err == nil && a.Zone() == ""
}
