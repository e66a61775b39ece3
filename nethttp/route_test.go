package nethttp_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRouteOfAWrappedMux: a layer that wraps a ServeMux (itself mounted
// under "/" of another mux) names the route the wrapped mux matches, for
// key functions, logs and metrics, whether the request is allowed or
// denied; a path the mux does not route falls back to the pattern the
// request already had.
func TestRouteOfAWrappedMux(t *testing.T) {
	var out lockedBuffer
	logs, err := observe.NewLogger(slog.New(slog.NewTextHandler(&out, nil)), observe.LoggerConfig{NearLimit: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	var routes sync.Map
	byRoute := func(r *core.Request) (string, error) {
		routes.Store(r.Route, true)
		return "k", nil
	}
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Observer: logs, Budgets: []core.Budget{
		{Name: "api", Quota: 2, Window: time.Minute, Key: byRoute},
		{Name: "ip", Quota: 100, Window: time.Minute, Key: keyfunc.PeerIP()},
	}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /users/{id}", func(http.ResponseWriter, *http.Request) {})
	top := http.NewServeMux()
	top.Handle("/", nethttp.MustMiddleware(eng, core.Use("api", "ip"))(mux))
	srv := httptest.NewServer(top)
	defer srv.Close()
	codes := map[int]int{}
	for _, path := range []string{"/hello", "/users/1", "/users/2"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 2 || codes[429] != 1 {
		t.Fatalf("statuses %v, want 2×200 and 1×429", codes)
	}
	for _, want := range []string{"/hello", "/users/{id}"} {
		if _, ok := routes.Load(want); !ok {
			t.Errorf("the key function never saw route %q", want)
		}
	}
	logged := out.String()
	for _, want := range []string{"route=/hello", "route=/users/{id}", "event=denied"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %q:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, "route=/ ") {
		t.Errorf("the log names the outer mux's route:\n%s", logged)
	}
}
