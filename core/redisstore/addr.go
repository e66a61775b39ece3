package redisstore

// This file turns one address string into a go-redis client for the
// store: a server, a server over TLS, or a Redis Cluster. One value names
// any of the topologies the store supports:
//
//	127.0.0.1:6379                              one server, no password, database 0
//	redis://user:secret@10.0.0.5:6379/2         one server, with ACL user, password and database
//	rediss://:secret@redis.example.com:6380     one server over TLS
//	10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000   Redis Cluster: some or all of its nodes
//	redis://:secret@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000
//	                                            Redis Cluster with a password (rediss:// for TLS)
//
// URLs are parsed by go-redis (redis.ParseURL, and redis.ParseClusterURL
// when they carry addr= parameters), so their query parameters
// (dial_timeout, pool_size, ...) work too.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/core"
)

// DefaultDialTimeout is how long a connection attempt may take unless a URL's
// dial_timeout parameter says otherwise: a Redis that cannot be reached
// costs a request at most the store's deadline anyway, and a short dial
// keeps start-up quick.
const DefaultDialTimeout = time.Second

// Addr is a parsed Redis address: one server or a cluster, with the
// options the store needs (ContextTimeoutEnabled, so that its deadline
// bounds every call, and a DefaultDialTimeout unless the URL sets one).
type Addr struct {
	single  *redis.Options
	cluster *redis.ClusterOptions
	display string
}

// Cluster reports whether the address names a Redis Cluster.
func (s Addr) Cluster() bool { return s.cluster != nil }

// String describes the value for logs: the addresses, the database and
// whether TLS is on, never a password.
func (s Addr) String() string { return s.display }

// ParseAddr parses a Redis address without connecting. Its errors say
// what is wrong and never repeat a password.
func ParseAddr(v string) (Addr, error) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return Addr{}, errors.New("empty")
	case strings.Contains(v, "@") && !strings.Contains(v, "://"):
		// Credentials without a scheme: say nothing of the value, which
		// holds a password.
		return Addr{}, errors.New("holds '@' but is not a redis:// or rediss:// URL; write credentials as redis://user:password@host:port")
	case strings.Contains(v, ","):
		var addrs []string
		for _, a := range strings.Split(v, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if strings.Contains(a, "://") {
				return Addr{}, errors.New("a comma-separated list holds host:port addresses only; for a cluster with a password or TLS, " +
					"give one URL with addr= parameters: redis://:password@host1:port?addr=host2:port&addr=host3:port")
			}
			if err := checkHostPort(a); err != nil {
				return Addr{}, fmt.Errorf("%q: %w", a, err)
			}
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			return Addr{}, errors.New("no address in the list")
		}
		o := &redis.ClusterOptions{Addrs: addrs}
		return finishCluster(o, "cluster "+strings.Join(addrs, ",")), nil
	case strings.Contains(v, "://"):
		return parseURL(v)
	default:
		if err := checkHostPort(v); err != nil {
			return Addr{}, fmt.Errorf("not host:port, a redis:// or rediss:// URL, or a comma-separated list of cluster nodes: %w", err)
		}
		return finishSingle(&redis.Options{Addr: v}, v), nil
	}
}

func parseURL(v string) (Addr, error) {
	u, err := url.Parse(v)
	if err != nil {
		// url's errors quote the whole value, password included.
		return Addr{}, errors.New("not a valid URL")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return Addr{}, fmt.Errorf("scheme %q: want redis:// or rediss:// (TLS)", u.Scheme)
	}
	shown := u.Redacted()
	if u.Query().Has("addr") {
		o, err := redis.ParseClusterURL(v)
		if err != nil {
			return Addr{}, fmt.Errorf("%s: %v", shown, redact(err, u))
		}
		return finishCluster(o, "cluster "+shown), nil
	}
	o, err := redis.ParseURL(v)
	if err != nil {
		return Addr{}, fmt.Errorf("%s: %v", shown, redact(err, u))
	}
	return finishSingle(o, shown), nil
}

// redact removes u's password from err's text.
func redact(err error, u *url.URL) string {
	s := err.Error()
	if p, ok := u.User.Password(); ok && p != "" {
		s = strings.ReplaceAll(s, p, "xxxxx")
	}
	return s
}

// The store bounds every call with its own deadline, which go-redis
// applies to sockets only with ContextTimeoutEnabled.
func finishSingle(o *redis.Options, display string) Addr {
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return Addr{single: o, display: display}
}

func finishCluster(o *redis.ClusterOptions, display string) Addr {
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return Addr{cluster: o, display: display}
}

// QuoteAddr returns the address v quoted for an error message, with the
// password of a URL replaced by "xxxxx".
func QuoteAddr(v string) string {
	if u, err := url.Parse(strings.TrimSpace(v)); err == nil && u.User != nil {
		return strconv.Quote(u.Redacted())
	}
	if strings.Contains(v, "@") {
		return `"<a URL that does not parse; not shown, it may hold a password>"`
	}
	return strconv.Quote(v)
}

// checkHostPort reports whether s is host:port with a numeric port.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("missing host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// Client returns a new client for s: a *redis.Client for one server, a
// *redis.ClusterClient for a cluster. The caller closes it.
func (s Addr) Client() redis.UniversalClient {
	if s.cluster != nil {
		o := *s.cluster
		return redis.NewClusterClient(&o)
	}
	o := *s.single
	return redis.NewClient(&o)
}

// Open returns a store on a new client for s, configured by cfg, and the
// client, which the caller closes (and may use for its own keys). When
// the store refuses the client for the server's topology (a single
// address that is a cluster node), the error says how to write the
// address instead.
func (s Addr) Open(cfg Config) (*Store, redis.UniversalClient, error) {
	client := s.Client()
	st, err := New(client, cfg)
	if err != nil {
		_ = client.Close()
		if !s.Cluster() && errors.Is(err, core.ErrMisconfigured) {
			err = fmt.Errorf("redis address %s: %w\n(for a Redis Cluster, give the addresses of its nodes, comma-separated: host1:port,host2:port,host3:port)", s, err)
		} else {
			err = fmt.Errorf("redis address %s: %w", s, err)
		}
		return nil, nil, err
	}
	return st, client, nil
}

// Open parses the Redis address addr (host:port, a redis:// or rediss://
// URL, or a cluster's nodes comma-separated; see [ParseAddr]) and returns
// a store on a new client for it, configured by cfg, and the client, which
// the caller closes:
//
//	store, client, err := redisstore.Open(os.Getenv("REDIS_URL"), redisstore.Config{})
func Open(addr string, cfg Config) (*Store, redis.UniversalClient, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("redis address %s: %w", QuoteAddr(addr), err)
	}
	return a.Open(cfg)
}
