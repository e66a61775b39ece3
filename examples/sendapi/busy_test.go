package sendapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// TestBusyIsNotDown runs the Gin command on a Redis 50 ms away each way
// with its store deadline set for that distance (REDIS_TIMEOUT=500ms), and
// sends 400 concurrent requests against one organisation's sms_send
// budget of 60: exactly 60 are admitted and no Redis call fails. Each of
// the store's runs answers in about 100 ms, within the deadline, but the
// burst queues about seven runs deep in the process, so the last requests
// wait about 700 ms in all. A deadline that counted that queue failed
// their calls, and fail-open let them through unlimited (67 of 50
// admitted in the report that found it, on a machine whose cores other
// processes kept busy, which made each run slow in the same way).
//
// The 50 ms proxy runs in a process of its own (e2e.DelayedRedis), as a
// network is apart from the clients that load the server: a proxy in the
// test's process, which sends the burst under -race, read the example's
// commands up to 450 ms after they reached its socket while other
// processes held both cores (a packet capture had the example's command
// on the wire on time), and the run timed out on the test's side of it.
func TestBusyIsNotDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a fresh one-minute window")
	}
	bin := e2e.Build(t, "./gin")
	rd := e2e.StartRedis(t)
	far := e2e.DelayedRedis(t, rd.Addr(), 50*time.Millisecond)
	p := start(t, bin, []string{"REDIS_TIMEOUT=500ms"}, "-redis", far)
	win := e2e.AwaitWindow(t, time.Minute, 30*time.Second)
	clients := make([]*e2e.Client, 8)
	for i := range clients {
		clients[i] = p.Client(t)
	}
	rs := spread(t, clients, 400, 400, load{method: "POST", path: "/v1/sms/messages", body: `{"to":"+15550100"}`,
		header: func(int) []string { return ak(initech) }})
	win.Check(t)
	var failed []string
	for _, line := range strings.Split(p.Stderr(), "\n") {
		if strings.Contains(line, "event=store_error") || strings.Contains(line, "event=breaker_open") {
			failed = append(failed, line)
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d store calls failed or skipped while Redis answered every run in about 100 ms; the first: %s", len(failed), failed[0])
	}
	admitted(t, rs, "sms_send", http.StatusAccepted, 60)
}
