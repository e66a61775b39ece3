// Package redisflag turns the examples' -redis flag into a go-redis client
// and a quotagate Redis store. One flag value names any of the topologies
// the store supports:
//
//	127.0.0.1:6379                              one server, no password, database 0
//	redis://user:secret@10.0.0.5:6379/2         one server, with ACL user, password and database
//	rediss://:secret@redis.example.com:6380     one server over TLS
//	10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000   Redis Cluster: some or all of its nodes
//	redis://:secret@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000
//	                                            Redis Cluster with a password (rediss:// for TLS)
//
// URLs are parsed by go-redis (redis.ParseURL, and redis.ParseClusterURL
// when they carry addr= parameters), so their query parameters (dial_timeout,
// pool_size, ...) work too.
//
// A single address that turns out to be a cluster node is refused at
// start-up (redisstore.New asks the server), with a message that says to
// list the cluster's nodes instead.
package redisflag

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
	"github.com/quotagate/quotagate/core/redisstore"
)

// Usage is the -redis flag's help text, for flag.String and friends. Its
// back-quoted word is the value's name in -h output.
const Usage = "`Redis` that holds the budgets, shared by every instance; empty: in memory. One of:\n" +
	"  host:port                        one server (e.g. 127.0.0.1:6379)\n" +
	"  redis://[user:password@]host:port[/db]   one server, with password and database\n" +
	"  rediss://[user:password@]host:port[/db]  the same over TLS\n" +
	"  host:port,host:port,...          Redis Cluster: the addresses of some or all of its nodes\n" +
	"  redis[s]://[user:password@]host:port?addr=host:port&addr=host:port   Redis Cluster with password or TLS"

// DialTimeout is how long a connection attempt may take unless a URL's
// dial_timeout parameter says otherwise: a Redis that cannot be reached
// costs a request at most the store's deadline anyway, and a short dial
// keeps start-up quick.
const DialTimeout = time.Second

// Spec is a parsed -redis value.
type Spec struct {
	single  *redis.Options
	cluster *redis.ClusterOptions
	display string
}

// Cluster reports whether the value names a Redis Cluster.
func (s Spec) Cluster() bool { return s.cluster != nil }

// String describes the value for logs: the addresses, the database and
// whether TLS is on, never a password.
func (s Spec) String() string { return s.display }

// Parse parses a -redis value without connecting. Its errors say what is
// wrong and never repeat a password.
func Parse(v string) (Spec, error) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return Spec{}, errors.New("empty")
	case strings.Contains(v, "@") && !strings.Contains(v, "://"):
		// Credentials without a scheme: say nothing of the value, which
		// holds a password.
		return Spec{}, errors.New("holds '@' but is not a redis:// or rediss:// URL; write credentials as redis://user:password@host:port")
	case strings.Contains(v, ","):
		var addrs []string
		for _, a := range strings.Split(v, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if strings.Contains(a, "://") {
				return Spec{}, errors.New("a comma-separated list holds host:port addresses only; for a cluster with a password or TLS, " +
					"give one URL with addr= parameters: redis://:password@host1:port?addr=host2:port&addr=host3:port")
			}
			if err := checkHostPort(a); err != nil {
				return Spec{}, fmt.Errorf("%q: %w", a, err)
			}
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			return Spec{}, errors.New("no address in the list")
		}
		o := &redis.ClusterOptions{Addrs: addrs}
		return finishCluster(o, "cluster "+strings.Join(addrs, ",")), nil
	case strings.Contains(v, "://"):
		return parseURL(v)
	default:
		if err := checkHostPort(v); err != nil {
			return Spec{}, fmt.Errorf("not host:port, a redis:// or rediss:// URL, or a comma-separated list of cluster nodes: %w", err)
		}
		return finishSingle(&redis.Options{Addr: v}, v), nil
	}
}

func parseURL(v string) (Spec, error) {
	u, err := url.Parse(v)
	if err != nil {
		// url's errors quote the whole value, password included.
		return Spec{}, errors.New("not a valid URL")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return Spec{}, fmt.Errorf("scheme %q: want redis:// or rediss:// (TLS)", u.Scheme)
	}
	shown := u.Redacted()
	if u.Query().Has("addr") {
		o, err := redis.ParseClusterURL(v)
		if err != nil {
			return Spec{}, fmt.Errorf("%s: %v", shown, redact(err, u))
		}
		return finishCluster(o, "cluster "+shown), nil
	}
	o, err := redis.ParseURL(v)
	if err != nil {
		return Spec{}, fmt.Errorf("%s: %v", shown, redact(err, u))
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
func finishSingle(o *redis.Options, display string) Spec {
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DialTimeout
	}
	return Spec{single: o, display: display}
}

func finishCluster(o *redis.ClusterOptions, display string) Spec {
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DialTimeout
	}
	return Spec{cluster: o, display: display}
}

// Quote returns v quoted for an error message, with the password of a URL
// replaced by "xxxxx".
func Quote(v string) string {
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
func (s Spec) Client() redis.UniversalClient {
	if s.cluster != nil {
		o := *s.cluster
		return redis.NewClusterClient(&o)
	}
	o := *s.single
	return redis.NewClient(&o)
}

// Open returns a quotagate Redis store on a new client for s, configured by
// opt, and the client, which the caller closes (and may use for its own
// keys). When the store refuses the client for the server's topology (a
// single address that is a cluster node), the error says how to write the
// flag instead.
func (s Spec) Open(opt redisstore.Config) (*redisstore.Store, redis.UniversalClient, error) {
	client := s.Client()
	st, err := redisstore.New(client, opt)
	if err != nil {
		_ = client.Close()
		if !s.Cluster() && errors.Is(err, core.ErrMisconfigured) {
			err = fmt.Errorf("-redis %s: %w\n(for a Redis Cluster, give -redis the addresses of its nodes, comma-separated: host1:port,host2:port,host3:port)", s, err)
		} else {
			err = fmt.Errorf("-redis %s: %w", s, err)
		}
		return nil, nil, err
	}
	return st, client, nil
}
