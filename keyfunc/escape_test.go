package keyfunc_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// skipServer serves a budget of 2 per minute keyed by kf that skips
// requests without a key (another budget limits those).
func skipServer(t *testing.T, kf core.KeyFunc) *httptest.Server {
	t.Helper()
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: []core.Budget{
		{Name: "api", Quota: 2, Window: time.Minute, Key: kf, MissingKey: core.MissingKeySkip},
	}})
	srv := httptest.NewServer(nethttp.MustMiddleware(eng, core.Use("api"))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	t.Cleanup(srv.Close)
	return srv
}

func send(t *testing.T, url string, values ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for _, v := range values {
		req.Header.Add("X-Tenant", v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestGarbledKeyNeverSkipsTheBudget: a key value that is over-long,
// repeated or malformed is never treated more kindly than a valid one,
// even by a budget that skips requests without a key: it is refused with
// a 400 that says what is wrong, while a valid key spends the budget.
func TestGarbledKeyNeverSkipsTheBudget(t *testing.T) {
	for name, kf := range map[string]core.KeyFunc{
		"Header": keyfunc.Header("tenant", "X-Tenant"),
		"TenantFunc": keyfunc.TenantFunc(func(r *core.Request) (string, bool) {
			v := r.Header.Get("X-Tenant")
			return v, v != ""
		}),
	} {
		t.Run(name, func(t *testing.T) {
			srv := skipServer(t, kf)
			admitted := 0
			for range 10 {
				if code, _ := send(t, srv.URL, "acme"); code == http.StatusOK {
					admitted++
				}
			}
			if admitted != 2 {
				t.Fatalf("valid tenant: %d of 10 admitted, want 2", admitted)
			}
			long := strings.Repeat("x", 304)
			admitted = 0
			for range 10 {
				code, body := send(t, srv.URL, long)
				if code == http.StatusOK {
					admitted++
				} else if code != http.StatusBadRequest || !strings.Contains(body, "malformed") {
					t.Fatalf("over-long tenant: %d %s; want 400 saying it is malformed", code, body)
				}
			}
			if admitted != 0 {
				t.Errorf("over-long tenant: %d of 10 admitted by a budget of 2 that skips keyless requests; want 0", admitted)
			}
			// No header at all: skipped, as configured.
			if code, _ := send(t, srv.URL); code != http.StatusOK {
				t.Errorf("no tenant: %d, want 200 (the budget skips it)", code)
			}
		})
	}
	// Header: two field lines are refused, never counted as either.
	srv := skipServer(t, keyfunc.Header("tenant", "X-Tenant"))
	for range 3 {
		if code, body := send(t, srv.URL, "a", "b"); code != http.StatusBadRequest || !strings.Contains(body, "X-Tenant") {
			t.Fatalf("two X-Tenant lines: %d %s; want 400 naming X-Tenant", code, body)
		}
	}
}

// TestNoKeyAnswerNamesWhatToSend: a budget that denies requests without a
// key answers 400 naming the header to send.
func TestNoKeyAnswerNamesWhatToSend(t *testing.T) {
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: []core.Budget{
		{Name: "api", Quota: 2, Window: time.Minute, Key: keyfunc.Header("tenant", "X-Tenant")},
	}})
	srv := httptest.NewServer(nethttp.MustMiddleware(eng, core.Use("api"))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()
	code, body := send(t, srv.URL)
	if code != http.StatusBadRequest || !strings.Contains(body, "the X-Tenant header") || !strings.Contains(body, "tenant") {
		t.Errorf("no tenant: %d %s; want 400 saying to send the tenant in the X-Tenant header", code, body)
	}
}
