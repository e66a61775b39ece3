package e2e

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

const fixture = "./testdata/fixture"

func TestBuildOnce(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	paths := make([]string, 4)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i] = Build(t, fixture)
		}()
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("Build returned %v, want one binary", paths)
		}
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Fatal(err)
	}
}

func TestStartClientsAndStop(t *testing.T) {
	// Not parallel: it sets an environment variable to see Unset work.
	t.Setenv("E2E_FIXTURE_INHERITED", "yes")
	bin := Build(t, fixture)
	p := Start(t, bin, Config{Env: []string{"FIXTURE_VALUE=42"}, Unset: []string{"E2E_FIXTURE_INHERITED"}})
	if !strings.HasPrefix(p.Addr, "127.0.0.1:") || p.Addr == "127.0.0.1:0" {
		t.Fatalf("Addr %q", p.Addr)
	}
	c := p.Client(t)
	if r := c.Do(t, "GET", "/env?name=FIXTURE_VALUE", ""); string(r.Body) != "true:42" {
		t.Fatalf("env: %s", r)
	}
	if r := c.Do(t, "GET", "/env?name=E2E_FIXTURE_INHERITED", ""); string(r.Body) != "false:" {
		t.Fatalf("unset variable reached the process: %s", r)
	}
	if r := c.Do(t, "GET", "/peer", ""); string(r.Body) != "127.0.0.1" {
		t.Fatalf("peer %s", r)
	}
	if r := p.ClientFrom(t, "127.0.0.7").Do(t, "GET", "/peer", ""); string(r.Body) != "127.0.0.7" {
		t.Fatalf("peer from 127.0.0.7: %s", r)
	}
	r := c.Do(t, "POST", "/log", `{"a":1}`, "X-Test", "v")
	if r.Status != 202 || r.Header.Get("X-Seen") != "v" {
		t.Fatalf("POST /log: %s", r)
	}
	if !p.WaitStderr("store_error", 5*time.Second) {
		t.Fatalf("stderr %q", p.Stderr())
	}
	if p.WaitStderr("never written", 50*time.Millisecond) {
		t.Fatal("WaitStderr found what was never written")
	}
	rs, err := c.Repeat(25, 5, "GET", "/peer", "")
	if err != nil || len(rs) != 25 || Statuses(rs)[200] != 25 {
		t.Fatalf("Repeat: %v %v", Statuses(rs), err)
	}
	p.Stop(t)
	if lines := Lines(p.Stdout()); len(lines) != 1 || lines[0] != "listening on "+p.Addr {
		t.Fatalf("stdout lines %q", lines)
	}
	if code, ok := p.Wait(time.Second); !ok || code != 0 {
		t.Fatalf("Wait after Stop: %d %v", code, ok)
	}
}

func TestExplicitAddr(t *testing.T) {
	t.Parallel()
	bin := Build(t, fixture)
	p := Start(t, bin, Config{Args: []string{"-addr=127.0.0.1:0"}})
	if p.Addr == "" {
		t.Fatal("no address")
	}
}

// recorder captures the failures a helper reports.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestStopReportsNonZeroExit(t *testing.T) {
	t.Parallel()
	bin := Build(t, fixture)
	p := Start(t, bin, Config{Env: []string{"FIXTURE_EXIT_1=1"}})
	rec := &recorder{TB: t}
	p.Stop(rec)
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "exited with status 1") {
		t.Fatalf("Stop reported %q", rec.errors)
	}
	p.Kill() // the cleanup must not report it again
}

func TestKillIsNotAFailure(t *testing.T) {
	t.Parallel()
	bin := Build(t, fixture)
	p := Start(t, bin, Config{})
	p.Kill()
	rec := &recorder{TB: t}
	p.Stop(rec)
	if len(rec.errors) != 0 {
		t.Fatalf("Stop after Kill reported %q", rec.errors)
	}
}

func TestRunInvalidConfiguration(t *testing.T) {
	t.Parallel()
	bin := Build(t, fixture)
	res := Run(t, bin, Config{Env: []string{"FIXTURE_FAIL=x"}}, 10*time.Second)
	if res.Code != 3 || !strings.Contains(res.Stderr, `invalid FIXTURE_FAIL="x"`) || res.Stdout != "" {
		t.Fatalf("Run: %+v", res)
	}
}

func TestHasFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-addr", "x"}, true},
		{[]string{"--addr=x"}, true},
		{[]string{"-address", "x"}, false},
		{[]string{"-redis", "addr"}, false},
		{[]string{"--", "-addr"}, false},
	} {
		if got := hasFlag(c.args, "addr"); got != c.want {
			t.Errorf("hasFlag(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestWindowAt(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 34, 56, 789, time.UTC)
	w := WindowAt(now, time.Minute)
	if !w.Start.Equal(time.Date(2026, 3, 1, 12, 34, 0, 0, time.UTC)) || !w.End.Equal(time.Date(2026, 3, 1, 12, 35, 0, 0, time.UTC)) {
		t.Fatalf("minute window %v", w)
	}
	w = WindowAt(now, 7*time.Second)
	if w.Start.UnixNano()%int64(7*time.Second) != 0 || now.Before(w.Start) || !now.Before(w.End) {
		t.Fatalf("7s window %v for %v", w, now)
	}
}

func TestAwaitWindow(t *testing.T) {
	t.Parallel()
	const length = 2 * time.Second
	for range 3 {
		w := AwaitWindow(t, length, time.Second)
		now := time.Now()
		if now.Before(w.Start) || w.End.Sub(now) < time.Second || w.End.Sub(w.Start) != length {
			t.Fatalf("AwaitWindow: %v at %v", w, now)
		}
		if w.Start.UnixNano()%int64(length) != 0 {
			t.Fatalf("window %v is not aligned", w)
		}
		w.Check(t)
		time.Sleep(700 * time.Millisecond)
	}
}

func TestRedisKillRestart(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if got := r.CLI("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	r.Kill()
	if r.Running() {
		t.Fatal("running after Kill")
	}
	r.Restart()
	if got := r.CLI("EXISTS", "k"); got != "0" {
		t.Fatalf("data survived the restart: EXISTS k = %q", got)
	}
}

func TestStartRejectsOtherFirstLine(t *testing.T) {
	t.Parallel()
	bin := Build(t, fixture)
	// Start fails the test through Fatalf; run it where that is harmless.
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec, bin, Config{Env: []string{"FIXTURE_WRONG_LINE=1"}})
	}()
	<-done
	if len(rec.fatal) != 1 || !strings.Contains(rec.fatal[0], `first line is "hello"`) {
		t.Fatalf("Start reported %q", rec.fatal)
	}
}

// fatalRecorder records Fatalf and ends the goroutine, as testing does.
type fatalRecorder struct {
	testing.TB
	fatal []string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = append(r.fatal, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func TestBuildAll(t *testing.T) {
	t.Parallel()
	paths := BuildAll(t, fixture, fixture)
	if len(paths) != 2 || paths[0] != paths[1] {
		t.Fatalf("BuildAll(fixture, fixture) = %q", paths)
	}
	if again := Build(t, fixture); again == "" {
		t.Fatal("Build after BuildAll returned no path")
	}
	p := Start(t, paths[0], Config{})
	if r := p.Client(t).Do(t, "GET", "/peer", ""); r.Status != 200 {
		t.Fatalf("GET /peer: %s", r)
	}
}

// TestBuildAllSameNames: two packages whose binaries go build names alike
// get a binary each.
func TestBuildAllSameNames(t *testing.T) {
	t.Parallel()
	paths := BuildAll(t, fixture, "./testdata/twin/fixture")
	if paths[0] == paths[1] {
		t.Fatalf("BuildAll = %q, want two binaries", paths)
	}
	if r := Run(t, paths[1], Config{}, 30*time.Second); r.Code != 0 || r.Stdout != "twin\n" {
		t.Fatalf("the twin ran as %+v", r)
	}
	if r := Run(t, paths[0], Config{Env: []string{"FIXTURE_FAIL=1"}}, 30*time.Second); r.Code != 3 {
		t.Fatalf("the fixture ran as %+v", r)
	}
}

func TestAwaitFresh(t *testing.T) {
	t.Parallel()
	const length = time.Second
	first := AwaitWindow(t, length, 300*time.Millisecond)
	if first.Ended() {
		t.Fatalf("window %v ended at once", first)
	}
	next := AwaitFresh(t, length, 300*time.Millisecond)
	if next.Start.Before(first.End) || next.End.Sub(next.Start) != length || next.Ended() {
		t.Fatalf("AwaitFresh after %v gave %v", first, next)
	}
	time.Sleep(time.Until(next.End))
	if !next.Ended() {
		t.Fatal("a past window has not ended")
	}
}

// TestDelayedRedis: the proxy process forwards what Redis answers, a round
// trip through it takes at least twice its delay, and it exits with status
// 0 when the test ends (Start's cleanup checks).
func TestDelayedRedis(t *testing.T) {
	t.Parallel()
	rd := StartRedis(t)
	const delay = 20 * time.Millisecond
	redistest.CheckDelayed(t, DelayedRedis(t, rd.Addr(), delay), delay)
}
