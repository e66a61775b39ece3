package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
)

func TestParse(t *testing.T) {
	valid := []struct {
		v       string
		cluster bool
		addrs   string // the addresses the client is given
		db      int
		tls     bool
		shown   string
	}{
		{v: "127.0.0.1:6379", addrs: "127.0.0.1:6379", shown: "127.0.0.1:6379"},
		{v: " 127.0.0.1:6379 ", addrs: "127.0.0.1:6379", shown: "127.0.0.1:6379"},
		{v: "redis://user:s3cret@10.0.0.5:6379/2", addrs: "10.0.0.5:6379", db: 2, shown: "redis://xxxxx@10.0.0.5:6379/2"},
		{v: "rediss://:s3cret@redis.example.com:6380", addrs: "redis.example.com:6380", tls: true, shown: "rediss://xxxxx@redis.example.com:6380"},
		{v: "10.0.0.1:7000,10.0.0.2:7000, 10.0.0.3:7000", cluster: true, addrs: "10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000", shown: "cluster 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000"},
		{v: "10.0.0.1:7000,", cluster: true, addrs: "10.0.0.1:7000", shown: "cluster 10.0.0.1:7000"},
		{v: "rediss://:s3cret@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", cluster: true, tls: true,
			addrs: "10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000", shown: "cluster rediss://xxxxx@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000"},
	}
	for _, c := range valid {
		s, err := ParseAddr(c.v)
		if err != nil {
			t.Errorf("ParseAddr(%q): %v", c.v, err)
			continue
		}
		var addrs string
		var db int
		var tls, cte bool
		var dial time.Duration
		if s.Cluster() {
			addrs, tls, cte, dial = strings.Join(s.cluster.Addrs, ","), s.cluster.TLSConfig != nil, s.cluster.ContextTimeoutEnabled, s.cluster.DialTimeout
		} else {
			addrs, db, tls, cte, dial = s.single.Addr, s.single.DB, s.single.TLSConfig != nil, s.single.ContextTimeoutEnabled, s.single.DialTimeout
		}
		if s.Cluster() != c.cluster || addrs != c.addrs || db != c.db || tls != c.tls || s.String() != c.shown {
			t.Errorf("ParseAddr(%q): cluster %v addrs %q db %d tls %v shown %q; want %v %q %d %v %q",
				c.v, s.Cluster(), addrs, db, tls, s.String(), c.cluster, c.addrs, c.db, c.tls, c.shown)
		}
		if !cte || dial != DefaultDialTimeout {
			t.Errorf("ParseAddr(%q): ContextTimeoutEnabled %v, DefaultDialTimeout %v; the store needs the first, and start-up wants %v", c.v, cte, dial, DefaultDialTimeout)
		}
		if s.Cluster() && s.cluster.ClusterStateReloadInterval != DefaultClusterStateReloadInterval {
			t.Errorf("ParseAddr(%q): ClusterStateReloadInterval %v, want %v, so that a client learns of a failover within about that",
				c.v, s.cluster.ClusterStateReloadInterval, DefaultClusterStateReloadInterval)
		}
	}

	invalid := []struct{ v, want string }{
		{"localhost", "not host:port"},
		{"127.0.0.1:99999", "99999"},
		{":6379", "missing host"},
		{"10.0.0.1:7000,nohost", `"nohost"`},
		{"10.0.0.1:7000,redis://10.0.0.2:7000", "addr="},
		{",, ,", "no address"},
		{"http://10.0.0.1:6379", "redis:// or rediss://"},
		{"redis://:s3cret@10.0.0.1:6379/notadb", "invalid database number"},
		{"redis://:s3cret@10.0.0.1:6379?addr=10.0.0.2:7000&db=x", "db"},
		{"", "empty"},
		{"user:s3cret@10.0.0.1:6379", "redis://user:password@host:port"},
		// go-redis's URL parser has no parameter for the reload interval.
		{"redis://10.0.0.1:7000?addr=10.0.0.2:7000&cluster_state_reload_interval=5s", "unexpected option"},
	}
	for _, c := range invalid {
		_, err := ParseAddr(c.v)
		if err == nil {
			t.Errorf("ParseAddr(%q) accepted it", c.v)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseAddr(%q): error %q does not say %q", c.v, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseAddr(%q): error %q shows the password", c.v, err)
		}
	}
}

func TestQuote(t *testing.T) {
	for v, want := range map[string]string{
		"127.0.0.1:6379":                  `"127.0.0.1:6379"`,
		"redis://u:s3cret@h:1/2":          `"redis://xxxxx@h:1/2"`,
		"redis://u:s3cret@h:1/%zz":        `"<a URL that does not parse; not shown, it may hold a password>"`,
		"10.0.0.1:7000,10.0.0.2:7000":     `"10.0.0.1:7000,10.0.0.2:7000"`,
		"rediss://:s3cret@h:1?addr=h2:1":  `"rediss://xxxxx@h:1?addr=h2:1"`,
		"redis://nopassword@h:1":          `"redis://xxxxx@h:1"`,
		"redis://10.0.0.1:6379/0?x=y&z=w": `"redis://10.0.0.1:6379/0?..."`,
	} {
		if got := QuoteAddr(v); got != want {
			t.Errorf("QuoteAddr(%q) = %s, want %s", v, got, want)
		}
	}
}

// take spends one unit of a 3-per-hour budget for each key and reports
// the outcomes.
func take(t *testing.T, st *Store, keys ...string) []core.Outcome {
	t.Helper()
	items := make([]core.Item, len(keys))
	for i, k := range keys {
		items[i] = core.Item{Budget: "b", Key: k, Cost: 1, Limit: core.Limit{Algorithm: core.FixedWindow, Quota: 3, Window: time.Hour}}
	}
	out := make([]core.Outcome, len(items))
	if err := st.Take(context.Background(), items, out); err != nil {
		t.Fatalf("take %v: %v", keys, err)
	}
	return out
}

// TestOpenURL: a redis:// URL's password and database reach the server.
func TestOpenURL(t *testing.T) {
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "s3cret")
	s, err := ParseAddr("redis://:s3cret@" + srv.Addr() + "/3")
	if err != nil {
		t.Fatal(err)
	}
	st, client, err := s.Open(Config{Prefix: "flag:", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// The one call: a URL to a store.
	st2, client2, err := Open("redis://:s3cret@"+srv.Addr()+"/3", Config{Prefix: "one:", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out := take(t, st2, "k"); !out[0].Charged {
		t.Fatalf("take through Open: %+v", out[0])
	}
	client2.Close()
	if _, _, err := Open("redis://:s3cret@"+srv.Addr()+"/x", Config{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a bad URL: %v; want an error that does not repeat the password", err)
	}
	if out := take(t, st, "k"); !out[0].Charged || out[0].Remaining != 2 {
		t.Fatalf("take: %+v", out[0])
	}
	check := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "s3cret", DB: 3})
	defer check.Close()
	if n, err := check.Exists(context.Background(), st.Key("k")).Result(); err != nil || n != 1 {
		t.Errorf("key %s in database 3: exists %d, %v", st.Key("k"), n, err)
	}
	// Without the password the store cannot work: Open refuses it
	// (TestOpenChecksTheServer); opened lazily, calls fail.
	s, _ = ParseAddr(srv.Addr())
	st, client, err = s.Open(Config{Timeout: 5 * time.Second, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := st.Take(context.Background(), []core.Item{{Budget: "b", Key: "k", Cost: 1, Limit: core.Limit{Quota: 1, Window: time.Hour}}}, make([]core.Outcome, 1)); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("take without the password: %v, want NOAUTH", err)
	}
}

// TestOpenCluster: a comma-separated list opens a cluster client, whose
// decisions span the cluster's nodes; one node's address alone is
// refused, with a message that says how to name a cluster.
func TestOpenCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	s, err := ParseAddr(strings.Join(cl.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	st, client, err := s.Open(Config{Prefix: "flag:", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, ok := client.(*redis.ClusterClient); !ok {
		t.Fatalf("client is a %T, want a *redis.ClusterClient", client)
	}
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
	}
	for round := 0; round < 4; round++ {
		out := take(t, st, keys...)
		for i, o := range out {
			if want := round < 3; o.Allowed != want || (want && o.Remaining != int64(2-round)) {
				t.Fatalf("round %d key %s: %+v", round, keys[i], o)
			}
		}
	}
	// The keys live on more than one node.
	used := 0
	for _, n := range cl.Nodes {
		if n.CLI("DBSIZE") != "0" {
			used++
		}
	}
	if used < 2 {
		t.Errorf("keys on %d node(s); the test wants them spread over the cluster", used)
	}

	one, _ := ParseAddr(cl.Nodes[0].Addr())
	if _, _, err := one.Open(Config{}); err == nil ||
		!strings.Contains(err.Error(), "cluster mode") || !strings.Contains(err.Error(), "comma-separated") {
		t.Errorf("one cluster node as a single server: err = %v; want a refusal that says to list the nodes comma-separated", err)
	}
}
