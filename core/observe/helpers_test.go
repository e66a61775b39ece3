package observe_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// fakeClock is the tests' hand-set clock.
type fakeClock = fakeclock.Clock

// t0 is a minute boundary.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newClock() *fakeClock { return fakeclock.New(t0) }

func remoteAddrKey(r *core.Request) (string, error) { return r.RemoteAddr, nil }

func headerKey(name string) core.KeyFunc {
	return func(r *core.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("header %s: %w", name, core.ErrNoKey)
	}
}

type engineOpts struct {
	observer core.Observer
	dryRun   bool
	store    core.Store
}

func newEngine(t testing.TB, c core.Clock, o engineOpts, budgets ...core.Budget) *core.Engine {
	t.Helper()
	s := o.store
	if s == nil {
		ms, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		s = ms
	}
	e, err := core.New(core.Config{Store: s, Budgets: budgets, Clock: c, Observer: o.observer, DryRun: o.dryRun})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func request(method, addr string) *core.Request {
	return &core.Request{Method: method, Path: "/items/42", Route: "/items/{id}", RemoteAddr: addr}
}

func decide(l *core.Layer, r *core.Request) *core.Decision {
	var d core.Decision
	l.Decide(r, &d)
	return &d
}

// recorder is a core.Observer that keeps copies of what it is told.
type recorder struct {
	mu        sync.Mutex
	decisions []recorded
	errors    []recordedErr
}

type recorded struct {
	d     core.Decision
	layer []core.Result
	lat   time.Duration
}

type recordedErr struct {
	kind   core.ErrorKind
	budget string
	err    error
}

func (r *recorder) ObserveDecision(_ *core.Request, d *core.Decision, layer []core.Result, lat time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions = append(r.decisions, recorded{d: *d, layer: append([]core.Result(nil), layer...), lat: lat})
}

func (r *recorder) ObserveError(kind core.ErrorKind, budget string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, recordedErr{kind, budget, err})
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// jsonLogger returns a JSON slog logger at level writing to a buffer.
func jsonLogger(level slog.Level) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level})), buf
}

// lines parses every JSON log line in buf.
func lines(t testing.TB, buf *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader([]byte(buf.String())))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// byEvent returns the lines whose event attribute is ev.
func byEvent(ls []map[string]any, ev string) []map[string]any {
	var out []map[string]any
	for _, l := range ls {
		if l["event"] == ev {
			out = append(out, l)
		}
	}
	return out
}

// suppressedSum sums the suppressed attributes of ls.
func suppressedSum(ls []map[string]any) int64 {
	var n int64
	for _, l := range ls {
		if v, ok := l["suppressed"].(float64); ok {
			n += int64(v)
		}
	}
	return n
}

// faultStore wraps a real store and fails every call while failing is set,
// to drive the engine's failure modes.
type faultStore struct {
	core.Store
	mu  sync.Mutex
	err error
}

func (f *faultStore) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *faultStore) current() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *faultStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if err := f.current(); err != nil {
		return err
	}
	return f.Store.Take(ctx, items, out)
}

func (f *faultStore) Refund(ctx context.Context, items []core.Item, outs []core.Outcome) error {
	if err := f.current(); err != nil {
		return err
	}
	return f.Store.Refund(ctx, items, outs)
}
