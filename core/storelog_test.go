package core_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.FieldsFunc(s.b.String(), func(r rune) bool { return r == '\n' })
}

// TestStoreFailuresAreLogged: with no observer configured, a store that
// fails is visible in the log at once (its first failure), then at most
// once per interval while it goes on failing, and once when it answers
// again; a store that never fails writes nothing.
func TestStoreFailuresAreLogged(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	var out syncBuffer
	fs := &flakyStore{Store: newStore(t, clock)}
	eng, err := core.New(core.Config{
		Store:            fs,
		Clock:            clock,
		Logger:           slog.New(slog.NewTextHandler(&out, nil)),
		BreakerThreshold: -1,
		Budgets:          []core.Budget{{Name: "api", Quota: 10, Window: time.Minute, Key: remoteAddrKey}},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := eng.MustLayer(core.Use("api"))
	r := request("GET", "10.0.0.1")
	for range 5 {
		decide(l, r)
	}
	if got := out.lines(); len(got) != 0 {
		t.Fatalf("a store that answers logged %q", got)
	}
	fs.down.Store(true)
	for range 100 {
		decide(l, r)
	}
	got := out.lines()
	if len(got) != 1 || !strings.Contains(got[0], "level=ERROR") || !strings.Contains(got[0], "store down") ||
		!strings.Contains(got[0], "api=open") {
		t.Fatalf("after 100 failures in an instant the log holds %q; want one ERROR line naming the error and the failure mode", got)
	}
	clock.Advance(core.StoreLogInterval / 2)
	decide(l, r)
	if n := len(out.lines()); n != 1 {
		t.Fatalf("half an interval later: %d lines, want still 1", n)
	}
	clock.Advance(core.StoreLogInterval / 2)
	decide(l, r)
	got = out.lines()
	if len(got) != 2 || !strings.Contains(got[1], "failures=101") {
		t.Fatalf("an interval later the log holds %q; want a second line counting the 101 failures since the first", got)
	}
	fs.down.Store(false)
	decide(l, r)
	decide(l, r)
	got = out.lines()
	if len(got) != 3 || !strings.Contains(got[2], "level=INFO") || !strings.Contains(got[2], "recovered") {
		t.Fatalf("after recovery the log holds %q; want one line saying the store recovered", got)
	}
}

// TestStoreFailuresGoToTheDefaultLogger: with no Logger configured, the
// lines go to slog's default logger.
func TestStoreFailuresGoToTheDefaultLogger(t *testing.T) {
	var out syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&out, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	fs := &flakyStore{Store: newStore(t, clock)}
	fs.down.Store(true)
	eng := core.MustNew(core.Config{Store: fs, Clock: clock,
		Budgets: []core.Budget{{Name: "api", Quota: 10, Window: time.Minute, Key: remoteAddrKey}}})
	decide(eng.MustLayer(core.Use("api")), request("GET", "10.0.0.1"))
	if got := out.lines(); len(got) != 1 || !strings.Contains(got[0], "store down") {
		t.Fatalf("slog's default logger got %q; want the store's failure", got)
	}
}
