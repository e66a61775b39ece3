package policy

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// fakeClock is the tests' hand-set clock.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock {
	// Aligned to a minute so fixed windows start at the beginning.
	return fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// Test key functions read plain headers; production code uses package
// keyfunc.
func headerKey(name string) core.KeyFunc {
	return func(r *core.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", core.ErrNoKey
	}
}

func testKeys() map[string]core.KeyFunc {
	return map[string]core.KeyFunc{
		"tenant": headerKey("X-Tenant"),
		"tenant+operator": func(r *core.Request) (string, error) {
			t, o := r.Header.Get("X-Tenant"), r.Header.Get("X-Operator")
			if t == "" || o == "" {
				return "", core.ErrNoKey
			}
			return t + "\x00" + o, nil
		},
		"ip": func(r *core.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				return "", core.ErrNoKey
			}
			return host, nil
		},
		"apikey":     headerKey("X-Api-Key"),
		"subscriber": headerKey("X-Subscriber"),
		"org":        headerKey("X-Org"),
		"global":     func(*core.Request) (string, error) { return "global", nil },
	}
}

// req builds a request with the given headers (name, value pairs).
func req(method string, kv ...string) *core.Request {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &core.Request{Method: method, Path: "/", RemoteAddr: "192.0.2.7:4000", Header: h, Context: context.Background()}
}

// subjectTable is an application's licence data, safe to change while a
// test runs.
type subjectTable struct {
	mu sync.Mutex
	m  map[string]Subject
}

func newSubjectTable(m map[string]Subject) *subjectTable {
	return &subjectTable{m: m}
}

func (t *subjectTable) set(key string, s Subject) {
	t.mu.Lock()
	t.m[key] = s
	t.mu.Unlock()
}

func (t *subjectTable) lookup(_ context.Context, key string) (Subject, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[key]
	if !ok {
		return Subject{}, errUnknownSubject
	}
	return s, nil
}

type testError string

func (e testError) Error() string { return string(e) }

const errUnknownSubject = testError("no such subject")

// seedTiers is the licence tier table of the multi-tenant API: small is
// 25% (given by the contract); the other shares are this test's choice.
func seedTiers(t testing.TB, fallback string) *Tiers {
	t.Helper()
	tiers, err := NewTiers([]Tier{
		{Name: "small", Share: Percent(25), UpTo: 100},
		{Name: "medium", Share: Percent(50), UpTo: 1000},
		{Name: "large", Share: Percent(100), UpTo: 10_000},
		{Name: "xl", Share: Percent(200)},
		{Name: "max", Share: Percent(400), PinnedOnly: true},
	}, fallback)
	if err != nil {
		t.Fatal(err)
	}
	return tiers
}

// take runs one request through layer and returns the decision.
func take(l *core.Layer, r *core.Request) core.Decision {
	var d core.Decision
	l.Decide(r, &d)
	return d
}

// admitted counts how many of n identical requests layer admits.
func admitted(l *core.Layer, n int, r func() *core.Request) int {
	ok := 0
	for range n {
		if d := take(l, r()); d.Allowed {
			ok++
		}
	}
	return ok
}

// warnings is a slog.Handler that keeps the loader's warnings (the
// "warning" attribute of each line).
type warnings struct {
	mu  sync.Mutex
	got []string
}

// warningLogger returns a logger for LoadConfig.Logger and what it kept.
func warningLogger() (*slog.Logger, *warnings) {
	w := &warnings{}
	return slog.New(w), w
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "warning" {
			w.got = append(w.got, a.Value.String())
		}
		return true
	})
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// list returns the warnings kept so far.
func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.got...)
}
