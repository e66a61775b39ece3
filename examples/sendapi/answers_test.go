package sendapi_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// TestEveryRequestAnswered sends each command, over raw TCP connections,
// requests that a server with default limits drops or holds: long header
// fields and URLs (served: a long token is normal), a header beyond the
// limit (431), bodies too large or too deep (413, 400). Each gets an HTTP
// status line. A body that never arrives, and a large header sent in
// pieces, are sent to every example's server, ten times over, by
// examples/internal/hostile.
func TestEveryRequestAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example servers")
	}
	key := "AccessKey " + acme1
	long := strings.Repeat("a", 10<<10)
	cases := []struct {
		name    string
		request string
		want    []int
	}{
		{"8 KiB Authorization", e2e.RawRequest("GET", "/v1/webhooks", "", "Authorization", "AccessKey "+strings.Repeat("t", 8<<10)), []int{401}},
		{"10 KiB path", e2e.RawRequest("GET", "/v1/messages/"+long, "", "Authorization", key), []int{404}},
		{"10 KiB query", e2e.RawRequest("GET", "/v1/webhooks?q="+long, "", "Authorization", key), []int{200}},
		{"10 KiB Idempotency-Key", e2e.RawRequest("POST", "/v1/sms/messages", `{"to":"+15550100"}`, "Authorization", key, "Idempotency-Key", long), []int{400}},
		{"20 KiB header field", e2e.RawRequest("GET", "/v1/webhooks", "", "Authorization", key, "X-Padding", strings.Repeat("p", 20<<10)), []int{431}},
		{"100,000 nested arrays", e2e.RawRequest("POST", "/v1/email/messages", e2e.NestedArrays(100_000), "Authorization", key), []int{413}},
		{"30,000 nested arrays", e2e.RawRequest("POST", "/v1/email/messages", e2e.NestedArrays(30_000), "Authorization", key), []int{400}},
		{"a path one segment longer than its route", e2e.RawRequest("GET", "/v1/messages/m1/extra", "", "Authorization", key), []int{404}},
	}
	concurrently(t, routers, func(t *testing.T, router string) {
		p := start(t, e2e.Build(t, "./"+router), nil)
		for _, c := range cases {
			res, err := p.Raw(c.request, 10*time.Second)
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
