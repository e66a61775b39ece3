package keyfunc_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// The raw credential used throughout; its distinctive middle must never
// show up anywhere but in the requests themselves.
const (
	rawAPIKey = "sk_live_RAWSECRET_7d3e1b"
	marker    = "RAWSECRET"
)

// logObserver logs everything the engine reports, keys included, the way
// an application's logging observer would.
type logObserver struct {
	mu  sync.Mutex
	log *slog.Logger
}

func (o *logObserver) ObserveDecision(_ *core.Request, d *core.Decision, layer []core.Result, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, res := range layer {
		o.log.Info("result", "budget", res.Budget, "key", res.Key, "allowed", res.Allowed)
	}
	if d.Err != nil {
		o.log.Info("decision", "reason", d.Reason.String(), "err", d.Err)
	}
}

func (o *logObserver) ObserveError(_ core.ErrorKind, budget string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log.Error("error", "budget", budget, "err", err)
}

type rawQueryKey struct{}

// TestNoRawAPIKeyLeaks sends the raw API key in every place a client can
// put it, well-formed and malformed, through a real HTTP server, and checks
// that it appears in no partition key, no log line, no error and no
// response.
func TestNoRawAPIKeyLeaks(t *testing.T) {
	hs, err := keyfunc.NewHasher(keyfunc.HashConfig{Secret: keyfunc.Secret("leak-test-secret-0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	apiKey, err := keyfunc.APIKey(keyfunc.APIKeyConfig{
		Hasher: hs, Scheme: "Bearer", Header: "X-API-Key", Query: "api_key",
		RawQuery: func(r *core.Request) string { s, _ := r.Value(rawQueryKey{}).(string); return s },
	})
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	obs := &logObserver{log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	eng, err := core.New(core.Config{
		Store:    memstore.MustNew(memstore.Config{}),
		Observer: obs,
		Budgets: []core.Budget{
			{Name: "per_key", Quota: 2, Window: time.Minute, Key: apiKey, KeyClass: "api_key"},
			{Name: "per_key_or_ip", Quota: 100, Window: time.Minute, Key: keyfunc.FirstOf(apiKey, keyfunc.PeerIP()), KeyClass: "api_key_or_ip"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.Middleware(eng, core.Use("per_key_or_ip", "per_key"))
	if err != nil {
		t.Fatal(err)
	}
	app := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	// The application stores the raw query where the key function can
	// read it, before the rate limiter runs.
	withQuery := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rawQueryKey{}, r.URL.RawQuery)))
	})
	srv := httptest.NewServer(withQuery)
	defer srv.Close()

	type variant struct {
		name  string
		query string
		hdrs  [][2]string
	}
	variants := []variant{
		{name: "bearer", hdrs: [][2]string{{"Authorization", "Bearer " + rawAPIKey}}},
		{name: "header", hdrs: [][2]string{{"X-API-Key", rawAPIKey}}},
		{name: "query", query: "api_key=" + rawAPIKey},
		{name: "duplicate authorization", hdrs: [][2]string{{"Authorization", "Bearer " + rawAPIKey}, {"Authorization", "Bearer " + rawAPIKey + "2"}}},
		{name: "duplicate header", hdrs: [][2]string{{"X-API-Key", rawAPIKey}, {"X-API-Key", rawAPIKey}}},
		{name: "duplicate query", query: "api_key=" + rawAPIKey + "&api_key=" + rawAPIKey},
		{name: "bad query escape", query: "api_key=" + rawAPIKey + "%zz"},
		{name: "too long", hdrs: [][2]string{{"X-API-Key", strings.Repeat(rawAPIKey, keyfunc.MaxAPIKeyLen/len(rawAPIKey)+1)}}},
		{name: "other scheme", hdrs: [][2]string{{"Authorization", "Basic " + rawAPIKey}}},
		{name: "none"},
	}
	client := srv.Client()
	statuses := map[string][]int{}
	for _, v := range variants {
		for range 3 { // the third bearer request exceeds per_key
			req, err := http.NewRequest("GET", srv.URL+"/items?"+v.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, hv := range v.hdrs {
				req.Header.Add(hv[0], hv[1])
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[v.name] = append(statuses[v.name], resp.StatusCode)
			if strings.Contains(string(body), marker) {
				t.Errorf("%s: the response body holds the raw key: %s", v.name, body)
			}
			for name, vals := range resp.Header {
				for _, val := range vals {
					if strings.Contains(val, marker) {
						t.Errorf("%s: response header %s holds the raw key", v.name, name)
					}
				}
			}

			// The same request, straight through the key function.
			cr := &core.Request{Method: "GET", Path: "/items", RemoteAddr: "192.0.2.1:1", Header: req.Header,
				Context: context.WithValue(context.Background(), rawQueryKey{}, req.URL.RawQuery)}
			k, err := apiKey(cr)
			if strings.Contains(k, marker) {
				t.Errorf("%s: the partition key holds the raw key", v.name)
			}
			if err != nil && strings.Contains(err.Error(), marker) {
				t.Errorf("%s: the error holds the raw key: %v", v.name, err)
			}
		}
	}

	// The requests did what they should, so the checks above saw real
	// keys, denials and errors.
	if got := statuses["bearer"]; got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Errorf("bearer statuses %v, want 200 200 429", got)
	}
	if got := statuses["header"]; got[0] != 429 {
		t.Errorf("the same key in X-API-Key got %v; it should share the bearer's exhausted budget", got)
	}
	// A missing credential is a 401 with a challenge; an ambiguous or
	// malformed one is a bad request.
	for _, name := range []string{"other scheme", "bad query escape", "none"} {
		if got := statuses[name]; got[0] != 401 {
			t.Errorf("%s: status %v, want 401 (no credential)", name, got)
		}
	}
	for _, name := range []string{"duplicate authorization", "duplicate header", "duplicate query", "too long"} {
		if got := statuses[name]; got[0] != 400 {
			t.Errorf("%s: status %v, want 400 (ambiguous or malformed credential)", name, got)
		}
	}
	logs := logBuf.String()
	if strings.Contains(logs, marker) {
		t.Errorf("a log line holds the raw key:\n%s", logs)
	}
	if want := "key=" + hs.Sum(rawAPIKey); !strings.Contains(logs, want) {
		t.Errorf("the log does not show the hashed key %s; the check above proves nothing:\n%s", want, logs)
	}
	if !strings.Contains(logs, "several Authorization field lines") || !strings.Contains(logs, "longer than") {
		t.Errorf("the log lacks the key function errors:\n%s", logs)
	}
}
