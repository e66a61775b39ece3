package quickstarts

import (
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
	"github.com/quotagate/quotagate/examples/internal/serve"
)

// readTimeout is the quickstarts' servers' ReadTimeout.
const readTimeout = serve.ReadTimeout

// TestEveryRequestAnswered: each quickstart serves long header fields and
// URLs (a long token is normal; Fiber's 4 KiB default read buffer would
// answer 431), and does not let a client that never finishes its request
// hold the connection past its read timeout.
func TestEveryRequestAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quickstarts and waits for their read timeout")
	}
	bins := e2e.BuildAll(t, examples...)
	long := strings.Repeat("a", 10<<10)
	cases := []struct {
		name, request string
		want          int
	}{
		{"8 KiB Authorization", e2e.RawRequest("GET", "/hello", "", "Authorization", "Bearer "+strings.Repeat("t", 8<<10)), 200},
		{"10 KiB query", e2e.RawRequest("GET", "/hello?q="+long, ""), 200},
		{"10 KiB path", e2e.RawRequest("GET", "/"+long, ""), 404},
		{"10 KiB Idempotency-Key", e2e.RawRequest("POST", "/items", "{}", "Idempotency-Key", long), 201},
	}
	for i, pkg := range examples {
		bin := bins[i]
		t.Run(strings.TrimPrefix(pkg, "../../"), func(t *testing.T) {
			t.Parallel()
			p := e2e.Start(t, bin, e2e.Config{})
			for _, c := range cases {
				res, err := p.Raw(c.request, 10*time.Second)
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
				} else if res.Status != c.want {
					t.Errorf("%s: %q, want %d", c.name, res.Line, c.want)
				}
			}
			// A request header that never ends: the server gives up on it
			// (with or without an answer) within its read timeout.
			res, err := p.Raw("GET /hello HTTP/1.1\r\nHost: example\r\nX-Slow: ", readTimeout+10*time.Second)
			if res.After > readTimeout+5*time.Second {
				t.Errorf("an unfinished request held its connection for %v (%v %v); the read timeout is %v", res.After, res.Line, err, readTimeout)
			}
		})
	}
}
