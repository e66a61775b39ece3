package sendapi_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// TestBusyIsNotDown runs the Gin command on Redis with its shipped
// settings (the store's 50 ms deadline) while six spinning processes keep
// both cores busy, and sends 400 concurrent requests against one
// organisation's sms_send budget of 60: exactly 60 are admitted and no
// Redis call fails. A busy process queues its store calls behind the run
// in flight; a deadline that counted that queue failed the calls, and
// fail-open let the requests through unlimited (67 of 50 admitted in the
// report that found it).
func TestBusyIsNotDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a fresh one-minute window")
	}
	bin := e2e.Build(t, "./gin")
	rd := e2e.StartRedis(t)
	p := start(t, bin, nil, "-redis", rd.Addr())
	spin(t, 6)
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
		t.Errorf("%d store calls failed or skipped on a busy machine whose Redis answered; the first: %s", len(failed), failed[0])
	}
	admitted(t, rs, "sms_send", http.StatusAccepted, 60)
}

// spin starts n processes that keep a core busy until the test ends.
func spin(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}
