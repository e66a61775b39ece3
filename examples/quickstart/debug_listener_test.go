package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// TestInspectionPageOnItsOwnListener: the API's listener does not serve
// the inspection page, even to a loopback client, so that a reverse proxy
// in front of the API cannot reach it; the page's own loopback listener
// serves it, and refuses a Host that is not a loopback name (DNS
// rebinding).
func TestInspectionPageOnItsOwnListener(t *testing.T) {
	p := e2e.Start(t, e2e.Build(t, "."), e2e.Config{})
	get := func(url, host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if host != "" {
			req.Host = host
		}
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(p.URL("/debug/quotagate"), ""); code != http.StatusNotFound {
		t.Errorf("the API's listener answers /debug/quotagate with %d, want 404", code)
	}
	page := debugURL(t, p)
	if code, body := get(page+"?format=json", ""); code != http.StatusOK || !strings.Contains(body, `"per_ip"`) {
		t.Errorf("the page's own listener: %d %.200s; want 200 with the budgets", code, body)
	}
	if code, _ := get(page, "evil.example"); code != http.StatusForbidden {
		t.Errorf("Host evil.example on the page's listener: %d, want 403", code)
	}
}
