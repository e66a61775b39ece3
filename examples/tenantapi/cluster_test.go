package tenantapi_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestCluster runs the four mains, one instance each, on one 3-node Redis
// Cluster (-redis with the nodes' addresses, comma-separated), and sends
// every budget more than its quota, spread over the four: together they
// admit exactly the quota, for tenants, operators and clients whose keys
// live on different nodes. One node's address alone is refused at
// start-up, with the fix.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and four example servers")
	}
	bins := binaries(t)
	cl := redistest.StartCluster(t, 3)

	res := e2e.Run(t, bins["nethttp"], e2e.Config{Args: []string{"-addr", "127.0.0.1:0", "-redis", cl.Nodes[0].Addr()}}, 30*time.Second)
	if res.Code == 0 || res.Stdout != "" || !strings.Contains(res.Stderr, "cluster mode") || !strings.Contains(res.Stderr, "comma-separated") {
		t.Errorf("one cluster node as -redis: exit %d, stdout %q, stderr %q; want a refusal naming cluster mode and the comma-separated form", res.Code, res.Stdout, res.Stderr)
	}

	args := []string{"-redis", strings.Join(cl.Addrs(), ",")}
	var servers []*server
	for _, r := range routers {
		s := startWith(t, bins[r], args)
		if len(servers) > 0 {
			s.ids = servers[0].ids // request ids are unique across instances too
		}
		servers = append(servers, s)
	}
	type clusterCase struct {
		q       req
		from    string
		quota   int
		ok      int
		clients []*e2e.Client
	}
	const extra = 6
	cases := []clusterCase{
		{q: get("/api/dashboard/values", "op-acme-alice"), quota: 150, ok: 200}, // t_values, small
		{q: post("/api/users/u1/disable", "op-acme-bob"), quota: 75, ok: 200},   // t_mutate, small
		{q: get("/api/reports/x", "op-hooli-hank"), quota: 15, ok: 200},         // t_heavy, medium
		{q: post("/api/credentials", "op-hooli-hank"), quota: 5, ok: 201},       // credential_issue
		{q: post("/api/checks", "op-globex-gina"), quota: 10, ok: 200},          // t_check, large
		{q: post("/api/outbound", "op-initech-ivan"), quota: 10, ok: 202},       // t_outbound, xl
		{q: get("/api/cards/c1/timeline", "op-acme-alice"), quota: 20, ok: 200}, // card_timeline
		{q: get("/portal/me", "sub-acme-1001"), quota: 60, ok: 200},             // portal
		{q: anon("POST", "/portal/zerologin"), from: "127.0.0.3", quota: 120, ok: 200},
	}
	for _, q := range publicRoutes {
		cases = append(cases, clusterCase{q: q, from: "127.0.0.2", quota: 20, ok: 200})
	}
	for i := range cases {
		for _, s := range servers {
			cases[i].clients = append(cases[i].clients, s.ClientFrom(t, cases[i].from))
		}
	}
	counted(t, 10*time.Second, func(t reporter) {
		var wg sync.WaitGroup
		for _, c := range cases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := c.quota + extra
				parts := make([][]*e2e.Response, len(servers))
				errs := make([]error, len(servers))
				var fns []func()
				for i, s := range servers {
					share := n / len(servers)
					if i < n%len(servers) {
						share++
					}
					fns = append(fns, func() { parts[i], errs[i] = s.repeat(c.clients[i], share, c.q) })
				}
				parallel(fns...)
				var all []*e2e.Response
				for i := range servers {
					if errs[i] != nil {
						t.Errorf("%v on %s: %v", c.q, routers[i], errs[i])
						return
					}
					all = append(all, parts[i]...)
				}
				for _, r := range all {
					if msg := servers[0].check(r); msg != "" {
						t.Errorf("%v: %s", c.q, msg)
						return
					}
				}
				if st := e2e.Statuses(all); st[c.ok] != c.quota || st[429] != extra {
					t.Errorf("%v: four instances on a cluster answered %v, want %d × %d and %d × 429", c.q, st, c.quota, c.ok, extra)
				}
			}()
		}
		wg.Wait()
	})
	used := 0
	for _, n := range cl.Nodes {
		if n.CLI("DBSIZE") != "0" {
			used++
		}
	}
	if used < 2 {
		t.Errorf("the example's keys are on %d node(s); the test wants them spread over the cluster", used)
	}
	for _, s := range servers {
		s.storeHeld(t)
		if strings.Contains(s.Stderr(), "store_misconfigured") {
			t.Errorf("instance at %s reports a misconfigured store:\n%s", s.Addr, s.Stderr())
		}
	}
}
