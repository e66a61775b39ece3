package policy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// policyDoc is a configuration whose changing budgets all move together:
// generation g gives a and b a quota of g×100000 and the by-tier c a
// reference of g×400000 (a small tenant gets a quarter). steady never
// changes.
func policyDoc(g int) string {
	return fmt.Sprintf(`tiers:
  small: {share: 25%%, up_to: 100}
  big:   {share: 100%%}
budgets:
  a: {quota: %d, window: 1h, key: tenant}
  b: {quota: %d, window: 1h, key: tenant}
  c: {quota: %d, window: 1h, key: tenant, quota_by: tier}
  steady: {quota: 1000000, window: 1h, key: tenant}
layers:
  all: {use: [a, b, c, steady]}
`, g*100_000, g*100_000, g*400_000)
}

// writeAtomic replaces path's content the way a deployment should: write a
// temporary file, then rename it over the old one.
func writeAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type reloadFixture struct {
	path  string
	opts  LoadConfig
	eng   *core.Engine
	layer *core.Layer
	rl    *Reloader
}

func newReloadFixture(t *testing.T, doc string) *reloadFixture {
	t.Helper()
	f := &reloadFixture{path: filepath.Join(t.TempDir(), "policy.yaml")}
	writeAtomic(t, f.path, doc)
	f.opts = testOptions(t, nil, map[string]Subject{"acme": {Cap: 10}})
	cfg, err := Load(f.path, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.MustNew(memstore.Config{Clock: newFakeClock(), SweepInterval: -1}) // time stands still
	t.Cleanup(func() { store.Close() })
	f.eng = core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	f.layer, err = cfg.Layer(f.eng, "all")
	if err != nil {
		t.Fatal(err)
	}
	f.rl = NewReloader(f.eng, f.path, f.opts, cfg)
	return f
}

// TestReloadUnderLoad swaps the policy back and forth while requests run:
// every decision sees one whole policy, and counters carry over.
func TestReloadUnderLoad(t *testing.T) {
	f := newReloadFixture(t, policyDoc(1))
	const workers, perWorker, reloads = 4, 1500, 60
	var (
		wg        sync.WaitGroup
		stop      atomic.Bool
		total     atomic.Int64
		seen      [3]atomic.Int64 // decisions seen per generation (1, 2)
		mixedOnce sync.Once
		mixed     string
	)
	for range workers {
		wg.Go(func() {
			// At least perWorker requests, and on until the reloads are
			// done (bounded: 4 × 20000 stays below every quota).
			for i := 0; i < 20_000 && (i < perWorker || !stop.Load()); i++ {
				d := take(f.layer, req("POST", "X-Tenant", "acme"))
				total.Add(1)
				if !d.Allowed || len(d.Results) != 4 {
					mixedOnce.Do(func() { mixed = fmt.Sprintf("denied or partial: %+v", d) })
					continue
				}
				a, b, c := d.Results[0].Limit.Quota, d.Results[1].Limit.Quota, d.Results[2].Limit.Quota
				g := a / 100_000
				if (g != 1 && g != 2) || b != a || c != a {
					mixedOnce.Do(func() { mixed = fmt.Sprintf("a=%d b=%d c=%d", a, b, c) })
					continue
				}
				seen[g].Add(1)
			}
		})
	}
	reloadErrs := make(chan error, reloads)
	wg.Go(func() {
		defer stop.Store(true)
		for i := range reloads {
			writeAtomic(t, f.path, policyDoc(2-i%2))
			if err := f.rl.Reload(); err != nil {
				reloadErrs <- err
			}
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	close(reloadErrs)
	for err := range reloadErrs {
		t.Fatalf("reload: %v", err)
	}
	if mixed != "" {
		t.Fatalf("a decision saw a half-applied policy: %s", mixed)
	}
	t.Logf("decisions under generation 1: %d, under generation 2: %d", seen[1].Load(), seen[2].Load())
	if seen[1].Load() == 0 || seen[2].Load() == 0 {
		t.Errorf("the reloads did not interleave with the requests")
	}
	// Counters carried over through every reload: each budget counted
	// every request, whatever policy was in force.
	n := total.Load() + 1
	d := take(f.layer, req("POST", "X-Tenant", "acme"))
	for _, r := range d.Results {
		if want := r.Limit.Quota - n; r.Remaining != want {
			t.Errorf("budget %s: remaining %d after %d requests with quota %d, want %d", r.Budget, r.Remaining, n, r.Limit.Quota, want)
		}
	}
}

func TestReloadRejected(t *testing.T) {
	f := newReloadFixture(t, policyDoc(1))
	for range 3 {
		take(f.layer, req("POST", "X-Tenant", "acme"))
	}
	before := f.rl.Current()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"invalid", strings.Replace(policyDoc(2), "quota: 200000", "quota: lots", 1), `budgets.a.quota: quota "lots" is not a whole number`},
		{"layers changed", strings.Replace(policyDoc(2), "use: [a, b, c, steady]", "use: [a, b, c]", 1), `layer "all" changed; layers are fixed at start-up`},
		{"layers added", policyDoc(2) + "  more: {use: [a]}\n", `the set of layers changed`},
		{"environment", strings.Replace(policyDoc(2), "quota: 1000000,", "quota: {env: STEADY_LIMIT},", 1), `environment variable STEADY_LIMIT="": is not set`},
	} {
		writeAtomic(t, f.path, tc.doc)
		err := f.rl.Reload()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if f.rl.Current() != before {
			t.Errorf("%s: the current configuration changed", tc.name)
		}
		// The running policy is untouched, counts included.
		d := take(f.layer, req("POST", "X-Tenant", "acme"))
		if q := d.Results[0].Limit.Quota; q != 100_000 {
			t.Errorf("%s: quota now %d, want the old 100000", tc.name, q)
		}
	}
	if d := take(f.layer, req("POST", "X-Tenant", "acme")); d.Results[3].Remaining != 1_000_000-8 {
		t.Errorf("steady remaining %d, want %d", d.Results[3].Remaining, 1_000_000-8)
	}
	// A missing file.
	os.Remove(f.path)
	if err := f.rl.Reload(); err == nil {
		t.Error("reloading a missing file succeeded")
	}
}

// The engine's own check: a budget a layer uses cannot disappear.
func TestApplyRejectedByEngine(t *testing.T) {
	doc := "budgets:\n  a: {quota: 5, window: 1m, key: tenant}\n  b: {quota: 5, window: 1m, key: tenant}\n"
	f := &reloadFixture{path: filepath.Join(t.TempDir(), "p.yaml")}
	writeAtomic(t, f.path, doc)
	opts := testOptions(t, nil, nil)
	cfg, err := Load(f.path, opts)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	defer store.Close()
	eng := core.MustNew(core.Config{Store: store, Budgets: cfg.Budgets()})
	eng.MustLayer(core.Use("b")) // created in code, not declared
	rl := NewReloader(eng, f.path, opts, cfg)
	writeAtomic(t, f.path, "budgets:\n  a: {quota: 9, window: 1m, key: tenant}\n")
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), `unknown budget "b"`) {
		t.Fatalf("err = %v", err)
	}
	if b, _ := eng.Budget("a"); b.Quota != 5 {
		t.Fatalf("budget a changed to %d", b.Quota)
	}
}

func TestWatch(t *testing.T) {
	f := newReloadFixture(t, policyDoc(1))
	sigs := make(chan os.Signal, 1)
	results := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.rl.Watch(ctx, sigs, func(err error) { results <- err })
		close(done)
	}()
	writeAtomic(t, f.path, policyDoc(2))
	sigs <- syscall.SIGHUP
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	if d := take(f.layer, req("POST", "X-Tenant", "acme")); d.Results[0].Limit.Quota != 200_000 {
		t.Fatalf("after SIGHUP quota %d, want 200000", d.Results[0].Limit.Quota)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
}
