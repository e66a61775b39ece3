package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// RaceEnv is the environment variable that makes [Build] compile with the
// race detector when set to 1.
const RaceEnv = "QUOTAGATE_E2E_RACE"

var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*built
}

type built struct {
	once sync.Once
	path string
	err  error
}

// Build compiles the main package pkg (a path go build accepts, relative to
// the test's package directory, such as "./nethttp", or an import path)
// and returns the binary's path. Each package is built once per test
// process, however many tests ask for it concurrently; a failed build
// fails every test that asks for it.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	key := buildKey(pkg)
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*built{}
	}
	b := builds.bins[key]
	if b == nil {
		b = &built{}
		builds.bins[key] = b
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "quotagate-e2e-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatalf("e2e: %v", err)
		}
		builds.dir = dir
	}
	dir := builds.dir
	n := len(builds.bins)
	builds.mu.Unlock()

	b.once.Do(func() {
		name := fmt.Sprintf("%02d-%s", n, filepath.Base(key))
		b.path = filepath.Join(dir, name)
		args := []string{"build", "-o", b.path}
		if os.Getenv(RaceEnv) == "1" {
			args = append(args, "-race")
		}
		args = append(args, pkg)
		start := time.Now()
		out, err := exec.Command(goTool(), args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		t.Logf("e2e: built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatalf("e2e: %v", b.err)
	}
	return b.path
}

// BuildAll is Build for several packages, compiled by one go build
// command so that the packages they share are compiled once. It returns the
// binaries' paths in the order of pkgs.
func BuildAll(t testing.TB, pkgs ...string) []string {
	t.Helper()
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*built{}
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "quotagate-e2e-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatalf("e2e: %v", err)
		}
		builds.dir = dir
	}
	var todo []string
	var mine []*built
	for _, pkg := range pkgs {
		key := buildKey(pkg)
		if builds.bins[key] == nil {
			b := &built{}
			b.once.Do(func() {}) // claimed here: built below, under the lock
			builds.bins[key] = b
			todo = append(todo, pkg)
			mine = append(mine, b)
		}
	}
	// go build -o DIR/ names each binary after its package's last path
	// element, and silently overwrites one with another of the same name
	// (examples/fiber and examples/sendapi/fiber): one go build, into a
	// directory of its own, per round of distinct names.
	for len(todo) > 0 {
		var round, next []string
		var roundBuilt, nextBuilt []*built
		names := map[string]bool{}
		for i, pkg := range todo {
			if name := filepath.Base(buildKey(pkg)); !names[name] {
				names[name] = true
				round, roundBuilt = append(round, pkg), append(roundBuilt, mine[i])
			} else {
				next, nextBuilt = append(next, pkg), append(nextBuilt, mine[i])
			}
		}
		buildRound(t, round, roundBuilt)
		todo, mine = next, nextBuilt
	}
	paths := make([]string, len(pkgs))
	var errs []string
	for i, pkg := range pkgs {
		b := builds.bins[buildKey(pkg)]
		b.once.Do(func() {}) // waits for a Build of it in progress
		if b.err != nil {
			errs = append(errs, b.err.Error())
		}
		paths[i] = b.path
	}
	builds.mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("e2e: %s", strings.Join(errs, "\n"))
	}
	return paths
}

// buildRound builds pkgs, whose binaries have distinct names, with one go
// build command, and records each one's path or the error in bs. Call it
// with builds.mu held.
func buildRound(t testing.TB, pkgs []string, bs []*built) {
	dir, err := os.MkdirTemp(builds.dir, "all-")
	if err == nil {
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if os.Getenv(RaceEnv) == "1" {
			args = append(args, "-race")
		}
		args = append(args, pkgs...)
		start := time.Now()
		out, cerr := exec.Command(goTool(), args...).CombinedOutput()
		if cerr != nil {
			err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), cerr, out)
		} else {
			t.Logf("e2e: built %s in %v", strings.Join(pkgs, " "), time.Since(start).Round(time.Millisecond))
		}
	}
	for i, b := range bs {
		b.err = err
		if err == nil {
			b.path = filepath.Join(dir, filepath.Base(buildKey(pkgs[i])))
			if _, serr := os.Stat(b.path); serr != nil {
				b.err = fmt.Errorf("go build wrote no %s: %v", b.path, serr)
			}
		}
	}
}

func buildKey(pkg string) string {
	if strings.HasPrefix(pkg, ".") {
		if abs, err := filepath.Abs(pkg); err == nil {
			return abs
		}
	}
	return pkg
}

// goTool returns the go command of the toolchain running the tests.
func goTool() string {
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// Main runs the tests of m and then removes the binaries [Build] made.
// Call it from TestMain: os.Exit(e2e.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	builds.mu.Lock()
	dir := builds.dir
	builds.dir, builds.bins = "", nil
	builds.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return code
}
