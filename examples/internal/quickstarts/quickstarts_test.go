// Package quickstarts runs the quickstart on every router
// (routers.Quickstarts) as a newcomer would, and checks that they behave
// the same: the same budgets, the same statuses, the same headers, a
// clean exit on SIGTERM.
package quickstarts

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
	"github.com/quotagate/quotagate/examples/internal/routers"
)

func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }

// examples are the quickstarts' packages, relative to this directory.
var examples = func() []string {
	var pkgs []string
	for _, dir := range routers.Quickstarts {
		pkgs = append(pkgs, "../../"+dir)
	}
	return pkgs
}()

func TestQuickstarts(t *testing.T) {
	bins := e2e.BuildAll(t, examples...)
	for i, pkg := range examples {
		bin := bins[i]
		t.Run(strings.TrimPrefix(pkg, "../../"), func(t *testing.T) {
			t.Parallel()
			p := e2e.Start(t, bin, e2e.Config{}) // stops it with SIGTERM and checks exit 0
			c := p.Client(t)
			// The budgets count in one-minute fixed windows: run inside one.
			win := e2e.AwaitWindow(t, time.Minute, 10*time.Second)
			first := c.Do(t, "GET", "/hello", "")
			if first.Status != http.StatusOK ||
				first.Header.Get("RateLimit-Policy") != `"per_ip";q=60;w=60` ||
				!strings.HasPrefix(first.Header.Get("RateLimit"), `"per_ip";r=59;t=`) {
				t.Fatalf("GET /hello: %v", first)
			}
			codes := map[int]int{}
			for i := 0; i < 12; i++ {
				r := c.Do(t, "POST", "/items", "")
				codes[r.Status]++
				if r.Status == http.StatusTooManyRequests {
					if r.Header.Get("Retry-After") == "" || r.Header.Get("Content-Type") != "application/problem+json" {
						t.Fatalf("denial without Retry-After or problem body: %v", r)
					}
				}
			}
			if codes[http.StatusCreated] != 10 || codes[http.StatusTooManyRequests] != 2 {
				t.Fatalf("POST /items statuses %v, want 10×201 and 2×429", codes)
			}
			// Denied writes spent nothing of per_ip: 60 - 1 GET - 10 admitted
			// POSTs - this GET = 48.
			last := c.Do(t, "GET", "/hello", "")
			if !strings.HasPrefix(last.Header.Get("RateLimit"), `"per_ip";r=48;t=`) {
				t.Fatalf("RateLimit after the writes: %q", last.Header.Get("RateLimit"))
			}
			win.Check(t)
			// Metrics, not limited: the same counts on every router.
			m := c.Do(t, "GET", "/metrics", "")
			if m.Status != http.StatusOK || m.Header.Get("RateLimit") != "" {
				t.Fatalf("GET /metrics: %d, RateLimit %q", m.Status, m.Header.Get("RateLimit"))
			}
			for _, want := range []string{
				`quotagate_decisions_total{budget="per_ip",outcome="allowed"} 12`,
				`quotagate_decisions_total{budget="per_ip",outcome="denied_elsewhere"} 2`,
				`quotagate_decisions_total{budget="writes",outcome="denied"} 2`,
			} {
				if !strings.Contains(string(m.Body), want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			if !strings.Contains(p.Stderr(), "request denied") {
				t.Errorf("no denial in the log:\n%s", p.Stderr())
			}
			if !strings.Contains(p.Stdout(), "curl") {
				t.Errorf("no curl lines to try in %q", p.Stdout())
			}
		})
	}
}
