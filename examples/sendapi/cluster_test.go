package sendapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestCluster runs the four commands, one instance each, on one 3-node
// Redis Cluster (-redis with the nodes' addresses, comma-separated): of
// concurrent requests spread over the four, each budget admits exactly its
// quota, for organisations and clients whose keys live on different nodes,
// and an idempotency key completed on one instance replays on another.
// One node's address alone is refused at start-up, with the fix.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and four example servers")
	}
	bins := e2e.BuildAll(t, "./nethttp", "./gin", "./echo", "./fiber")
	cl := redistest.StartCluster(t, 3)
	nodes := strings.Join(cl.Addrs(), ",")

	res := e2e.Run(t, bins[0], e2e.Config{Args: []string{"-addr", "127.0.0.1:0", "-redis", cl.Nodes[0].Addr()}, Unset: hermetic}, 20*time.Second)
	if res.Code == 0 || res.Stdout != "" || !strings.Contains(res.Stderr, "cluster mode") || !strings.Contains(res.Stderr, "comma-separated") {
		t.Errorf("one cluster node as -redis: exit %d, stdout %q, stderr %q; want a refusal naming cluster mode and the comma-separated form", res.Code, res.Stdout, res.Stderr)
	}

	var clients []*e2e.Client
	var procs []*e2e.Process
	for _, bin := range bins {
		p := start(t, bin, slowRedis, "-redis", nodes)
		procs = append(procs, p)
		clients = append(clients, p.Client(t))
	}
	win := e2e.AwaitWindow(t, time.Minute, 40*time.Second)
	keyed := func(keys ...string) func(int) []string {
		return func(i int) []string { return ak(keys[i/len(clients)%len(keys)]) }
	}
	admitted(t, spread(t, clients, 130, 4, load{method: "POST", path: "/v1/email/messages", body: `{"to":"a@example.com"}`, header: keyed(acme1, acme2)}), "email_send", http.StatusAccepted, 100)
	admitted(t, spread(t, clients, 80, 4, load{method: "POST", path: "/v1/sms/messages", body: `{"to":"+15550100"}`, header: keyed(acme1, acme2)}), "sms_send", http.StatusAccepted, 60)
	admitted(t, spread(t, clients, 330, 4, load{method: "GET", path: "/v1/webhooks", header: keyed(initech)}), "management", http.StatusOK, 300)
	admitted(t, spread(t, clients, 16, 4, load{method: "POST", path: "/v1/auth/password-reset", body: `{"email":"a@example.com"}`}), "auth", http.StatusAccepted, 10)
	// acme's other key has its own management budget, on every instance.
	for i, c := range clients {
		expect(t, do(t, c, "GET", "/v1/webhooks", "", ak(acme2)...), http.StatusOK, "management", 300, int64(299-i))
	}
	win.Check(t)

	used := 0
	for _, n := range cl.Nodes {
		if n.CLI("DBSIZE") != "0" {
			used++
		}
	}
	if used < 2 {
		t.Errorf("the examples' keys are on %d node(s); the test wants them spread over the cluster", used)
	}

	sms := `{"to":"+15550100"}`
	first := do(t, clients[0], "POST", "/v1/sms/messages", sms, idem("k-cluster", ak(globex)...)...)
	expect(t, first, http.StatusAccepted, "sms_send", 960, 959)
	for _, c := range clients[1:] {
		r := do(t, c, "POST", "/v1/sms/messages", sms, idem("k-cluster", ak(globex)...)...)
		if r.Status != first.Status || string(r.Body) != string(first.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay on another instance: %v\nwant %d %s replayed", r.Response, first.Status, first.Body)
		}
	}
	for _, p := range procs {
		if n := strings.Count(p.Stderr(), "event=store_error") + strings.Count(p.Stderr(), "event=store_misconfigured"); n > 0 {
			t.Errorf("instance at %s logged %d store errors: counts above may have failed open\n%s", p.Addr, n, p.Stderr())
		}
	}
}
