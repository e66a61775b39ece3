package tenantapi_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// TestEveryRequestAnswered sends each main, over raw TCP connections,
// requests that a server with default limits drops or holds: long header
// fields and URLs (served: a long token is normal), a header beyond the
// limit (431), a body too deep to parse (400), and paths one segment
// longer than a route (404 on every router, Echo included). Each gets an
// HTTP status line. A body that never arrives, and a large header sent in
// pieces, are sent to every example's server, ten times over, by
// examples/internal/hostile.
func TestEveryRequestAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example servers")
	}
	bins := binaries(t)
	const alice = "Bearer op-acme-alice"
	long := strings.Repeat("a", 10<<10)
	cases := []struct {
		name    string
		request string
		want    []int
	}{
		{"8 KiB Authorization", e2e.RawRequest("GET", "/api/users", "", "Authorization", "Bearer "+strings.Repeat("t", 8<<10)), []int{401}},
		{"10 KiB path", e2e.RawRequest("GET", "/api/reports/"+long, "", "Authorization", alice), []int{200}},
		{"10 KiB query", e2e.RawRequest("GET", "/api/users?q="+long, "", "Authorization", alice), []int{200}},
		{"10 KiB Idempotency-Key", e2e.RawRequest("POST", "/api/checks", "", "Authorization", alice, "Idempotency-Key", long), []int{200}},
		{"20 KiB header field", e2e.RawRequest("GET", "/api/users", "", "Authorization", alice, "X-Padding", strings.Repeat("p", 20<<10)), []int{431}},
		{"100,000 nested arrays", e2e.RawRequest("POST", "/api/users/bulk-disable", e2e.NestedArrays(100_000), "Authorization", alice), []int{400}},
		{"a path one segment longer than its route", e2e.RawRequest("GET", "/api/reports/x/extra", "", "Authorization", alice), []int{404}},
		{"a longer path still", e2e.RawRequest("GET", "/api/cards/c1/timeline/x", "", "Authorization", alice), []int{404}},
	}
	concurrently(t, allRouters(), func(t *testing.T, r router) {
		s := start(t, bins, variant{string(r), false}, nil)
		for _, c := range cases {
			res, err := s.Raw(c.request, 10*time.Second)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			if !slices.Contains(c.want, res.Status) {
				t.Errorf("%s: %q, want status %v", c.name, res.Line, c.want)
			}
		}
	})
}
