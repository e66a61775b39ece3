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
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
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

// DefaultClusterStateReloadInterval is how often a cluster client from
// [ParseAddr] re-reads the cluster's slot map (one CLUSTER SLOTS, to one
// node) while it is used. go-redis's default, 60 s, is how long such a
// client could keep sending a dead master's keys to it after its replica
// took over, since go-redis re-reads the map on MOVED and ASK replies and
// not when a connection fails. One small command a second per client is
// cheap; an idle client sends none (go-redis reloads when a command finds
// the map older than this). The store also asks for a reload when a call
// fails without a reply (see the package documentation, Redis Cluster).
// go-redis's URL parser has no parameter for it.
const DefaultClusterStateReloadInterval = time.Second

// Addr is a parsed Redis address: one server or a cluster, with the
// options the store needs (ContextTimeoutEnabled, so that its deadline
// bounds every call, and a DefaultDialTimeout unless the URL sets one),
// DisableIdentity (a new connection sends HELLO and no CLIENT SETINFO,
// whose round trip would count against the first call's deadline) and,
// for a cluster, a DefaultClusterStateReloadInterval.
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
				if strings.ContainsAny(a, "?@") { // may hold a secret: not shown
					return Addr{}, fmt.Errorf("an entry that is not host:port: %w", err)
				}
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
	shown := showURL(u)
	if u.Query().Has("addr") {
		o, err := redis.ParseClusterURL(v)
		if err == nil {
			err = checkClusterOptions(o)
		}
		if err != nil {
			return Addr{}, errors.New(redact(err, u))
		}
		return finishCluster(o, "cluster "+shown), nil
	}
	o, err := redis.ParseURL(v)
	if err == nil {
		err = checkOptions(o)
	}
	if err != nil {
		return Addr{}, errors.New(redact(err, u))
	}
	return finishSingle(o, shown), nil
}

// showURL describes u for errors and logs: its scheme, hosts and
// database, never its user, password or other query values (a query may
// hold a password): "xxxxx@" stands for credentials, "..." for the rest
// of a query.
func showURL(u *url.URL) string {
	s := u.Scheme + "://"
	if u.User != nil {
		s += "xxxxx@"
	}
	s += u.Host + u.EscapedPath()
	if u.RawQuery == "" {
		return s
	}
	var parts []string
	rest := false
	for k, vs := range u.Query() {
		for _, v := range vs {
			if k == "addr" && checkHostPort(v) == nil {
				parts = append(parts, "addr="+v)
			} else {
				rest = true
			}
		}
	}
	slices.Sort(parts)
	if rest {
		parts = append(parts, "...")
	}
	return s + "?" + strings.Join(parts, "&")
}

// redact removes u's user, password and query values from err's text.
func redact(err error, u *url.URL) string {
	s := err.Error()
	var secrets []string
	if u.User != nil {
		secrets = append(secrets, u.User.Username())
		if p, ok := u.User.Password(); ok {
			secrets = append(secrets, p)
		}
	}
	for _, vs := range u.Query() {
		secrets = append(secrets, vs...)
	}
	for _, v := range secrets {
		if len(v) >= 3 { // shorter values cannot be told from the text around them
			s = strings.ReplaceAll(s, v, "xxxxx")
		}
	}
	return s
}

// maxConns bounds the connection counts a URL may ask for: more than any
// one process can use against one server, far less than what would
// exhaust its memory (go-redis sizes a channel by PoolSize at once).
const maxConns = 10_000

// checkOptions refuses option values that go-redis would accept and then
// misbehave on: a negative or huge pool (a panic or an allocation that
// ends the process), a negative database, retry count or dial timeout.
func checkOptions(o *redis.Options) error {
	if o.DB < 0 {
		return fmt.Errorf("database %d: want 0 or more", o.DB)
	}
	return checkPool(o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.MaxRetries, o.DialTimeout)
}

func checkClusterOptions(o *redis.ClusterOptions) error {
	return checkPool(o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.MaxRetries, o.DialTimeout)
}

func checkPool(pool, minIdle, maxIdle, maxActive, retries int, dial time.Duration) error {
	for _, c := range []struct {
		name string
		n    int
	}{{"pool_size", pool}, {"min_idle_conns", minIdle}, {"max_idle_conns", maxIdle}, {"max_active_conns", maxActive}} {
		if c.n < 0 || c.n > maxConns {
			return fmt.Errorf("%s=%d: want 0 (go-redis's default) to %d", c.name, c.n, maxConns)
		}
	}
	if retries < -1 {
		return fmt.Errorf("max_retries=%d: want -1 (no retries) or more", retries)
	}
	if dial < 0 {
		return errors.New("dial_timeout is negative: want a positive duration, e.g. dial_timeout=1s")
	}
	return nil
}

// The store bounds every call with its own deadline, which go-redis
// applies to sockets only with ContextTimeoutEnabled. A call on a new
// connection also pays for the connection's handshake within that
// deadline: HELLO, then go-redis's CLIENT SETINFO pair, one round trip
// more that only labels the connection in CLIENT LIST; DisableIdentity
// leaves it out.
func finishSingle(o *redis.Options, display string) Addr {
	o.ContextTimeoutEnabled = true
	o.DisableIdentity = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return Addr{single: o, display: display}
}

func finishCluster(o *redis.ClusterOptions, display string) Addr {
	o.ContextTimeoutEnabled = true
	o.DisableIdentity = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ClusterStateReloadInterval == 0 {
		o.ClusterStateReloadInterval = DefaultClusterStateReloadInterval
	}
	return Addr{cluster: o, display: display}
}

// QuoteAddr returns the address v quoted for an error message, with a
// URL's credentials replaced by "xxxxx" and its query by "?..." (which
// may hold a password).
func QuoteAddr(v string) string {
	if u, err := url.Parse(strings.TrimSpace(v)); err == nil && (u.User != nil || u.RawQuery != "") {
		return strconv.Quote(showURL(u))
	}
	if strings.Contains(v, "@") {
		return `"<a URL that does not parse; not shown, it may hold a password>"`
	}
	return strconv.Quote(v)
}

// checkHostPort reports whether s is host:port with a numeric port. Its
// errors do not repeat s, which may hold a secret (a query's password).
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err) // "missing port in address", without the address
		}
		return errors.New("not host:port")
	}
	if host == "" {
		return errors.New("missing host")
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._:%", c)) {
			return errors.New("the host is not a name or an IP address") // not shown: it may hold a secret
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		if len(port) > 5 || strings.ContainsAny(port, "?@=&") {
			return errors.New("the port is not a number from 1 to 65535") // not shown: it may hold a secret
		}
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
	var st *Store
	var err error
	if !cfg.Lazy {
		err = s.ping(client)
	}
	if err == nil {
		st, err = New(client, cfg)
	}
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

// ping checks that the server (every master of a cluster) answers PING
// with the address's credentials and database, within the dial timeout
// plus topologyCheckTimeout.
func (s Addr) ping(client redis.UniversalClient) error {
	dial := DefaultDialTimeout
	if s.single != nil && s.single.DialTimeout > 0 {
		dial = s.single.DialTimeout
	} else if s.cluster != nil && s.cluster.DialTimeout > 0 {
		dial = s.cluster.DialTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), dial+topologyCheckTimeout)
	defer cancel()
	var err error
	if c, ok := client.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	} else {
		err = client.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("the server does not answer PING: %v (set redisstore.Config.Lazy to open without asking)", err)
	}
	return nil
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
