package redisstore

import (
	"bytes"
	"context"
	"errors"
	logslog "log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// latencySlack is what a decision may take beyond the store's deadline
// under -race on a loaded two-core machine (scheduling delays: 450 ms was
// seen at a load average of 20). Without the deadline the same decisions
// take go-redis's read timeout and retries: 3 s or more.
const latencySlack = 1500 * time.Millisecond

// errObserver counts the errors reported to the engine's observer, in all
// and by kind.
type errObserver struct {
	errs   atomic.Int64
	byKind [core.NumErrorKinds]atomic.Int64
}

func (o *errObserver) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {}
func (o *errObserver) ObserveError(kind core.ErrorKind, _ string, _ error) {
	o.errs.Add(1)
	o.byKind[kind].Add(1)
}

type faultRig struct {
	eng   *core.Engine
	layer *core.Layer
	obs   *errObserver
}

func newFaultRig(t *testing.T, st core.Store, cfg core.Config) *faultRig {
	t.Helper()
	obs := &errObserver{}
	cfg.Store, cfg.Observer = st, obs
	if cfg.Budgets == nil {
		cfg.Budgets = []core.Budget{{Name: "api", Quota: 5, Window: time.Hour, Key: constKey("client")}}
	}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &faultRig{eng: eng, layer: eng.MustLayer(core.Use("api")), obs: obs}
}

func (r *faultRig) decide() (core.Decision, time.Duration) {
	req := core.Request{Method: "GET", Path: "/", Context: context.Background()}
	var d core.Decision
	start := time.Now()
	r.layer.Decide(&req, &d)
	return d, time.Since(start)
}

// expectLimiting checks that the budget (quota 5, fresh) admits exactly 5.
func (r *faultRig) expectLimiting(t *testing.T) {
	t.Helper()
	for i := 0; i < 6; i++ {
		d, _ := r.decide()
		if d.Err != nil {
			t.Fatalf("decision %d: %v", i, d.Err)
		}
		if d.Allowed != (i < 5) {
			t.Fatalf("decision %d: allowed %v, want %v", i, d.Allowed, i < 5)
		}
	}
}

// TestRedisKilledFailOpen kills Redis while requests flow through an
// engine: every request keeps passing, none waits longer than the store's
// deadline, errors reach the observer, and limiting resumes once Redis is
// back.
func TestRedisKilledFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	// go-redis defaults (retries included), with deadlines honoured.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	const deadline = 300 * time.Millisecond
	st := mustStore(t, client, Config{Prefix: "kill:", Timeout: deadline})
	rig := newFaultRig(t, st, core.Config{BreakerThreshold: -1})
	rig.expectLimiting(t)

	// Traffic from 8 goroutines while Redis dies.
	var (
		stop         atomic.Bool
		worst        atomic.Int64
		errored      atomic.Int64
		deniedInOuts atomic.Int64
		wg           sync.WaitGroup
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				d, lat := rig.decide()
				if int64(lat) > worst.Load() {
					worst.Store(int64(lat))
				}
				if d.Err != nil {
					errored.Add(1)
					if !d.Allowed {
						deniedInOuts.Add(1)
					}
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	srv.Kill()
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if errored.Load() == 0 {
		t.Fatal("no decision saw the outage")
	}
	if n := deniedInOuts.Load(); n != 0 {
		t.Errorf("%d failed decisions were denied; fail-open lets them through", n)
	}
	if w := time.Duration(worst.Load()); w > deadline+latencySlack {
		t.Errorf("worst decision latency %v during the outage; the deadline is %v", w, deadline)
	}
	if rig.obs.errs.Load() == 0 {
		t.Error("the observer saw no store error")
	}

	srv.Restart()
	until := time.Now().Add(5 * time.Second)
	for {
		// A cost-0 probe: the restarted server is empty.
		out := make([]core.Outcome, 1)
		err := st.Take(context.Background(), []core.Item{item("probe", "p", fixed(1, time.Second), 0, false)}, out)
		if err == nil {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("store still failing after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rig.expectLimiting(t)
	assertTTLs(t, client, "kill:")
}

// TestBlackhole points the store at a server that accepts connections and
// never answers: fail-open passes within the deadline, fail-closed denies
// with ReasonUnavailable, and the circuit breaker stops calling.
func TestBlackhole(t *testing.T) {
	addr := redistest.Blackhole(t)
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer client.Close()
	hook := newCountingHook()
	client.AddHook(hook)
	st := mustStore(t, client, Config{Timeout: DefaultTimeout})

	t.Run("fail-open", func(t *testing.T) {
		rig := newFaultRig(t, st, core.Config{BreakerThreshold: -1})
		for i := 0; i < 5; i++ {
			d, lat := rig.decide()
			if !d.Allowed || d.Err == nil || !errors.Is(d.Err, context.DeadlineExceeded) {
				t.Errorf("decision %d: allowed %v err %v; want allowed with a deadline error", i, d.Allowed, d.Err)
			}
			if lat < DefaultTimeout/2 || lat > DefaultTimeout+latencySlack {
				t.Errorf("decision %d took %v; the deadline is %v", i, lat, DefaultTimeout)
			}
			if !d.Results[0].FailedOpen {
				t.Errorf("result not marked failed-open: %+v", d.Results[0])
			}
		}
	})

	t.Run("fail-closed", func(t *testing.T) {
		rig := newFaultRig(t, st, core.Config{BreakerThreshold: -1, FailureMode: core.FailClosed})
		d, lat := rig.decide()
		if d.Allowed || d.Reason != core.ReasonUnavailable || d.RetryAfter <= 0 || d.DeniedBy != "api" {
			t.Errorf("fail-closed: allowed %v reason %v retry-after %v denied by %q", d.Allowed, d.Reason, d.RetryAfter, d.DeniedBy)
		}
		if lat > DefaultTimeout+latencySlack {
			t.Errorf("took %v", lat)
		}
	})

	t.Run("fail-local", func(t *testing.T) {
		mem := memstore.MustNew(memstore.Config{SweepInterval: -1})
		rig := newFaultRig(t, st, core.Config{BreakerThreshold: 2, BreakerCooldown: time.Minute, FailureMode: core.FailLocal, Fallback: mem})
		for i := 0; i < 6; i++ {
			d, _ := rig.decide()
			if d.Allowed != (i < 5) || !d.Results[0].Local {
				t.Errorf("decision %d on the local fallback: allowed %v local %v", i, d.Allowed, d.Results[0].Local)
			}
		}
	})

	t.Run("breaker", func(t *testing.T) {
		rig := newFaultRig(t, st, core.Config{BreakerThreshold: 3, BreakerCooldown: time.Minute})
		for i := 0; i < 3; i++ {
			rig.decide()
		}
		if !rig.eng.BreakerOpen() {
			t.Fatal("breaker still closed after 3 failures")
		}
		hook.reset()
		for i := 0; i < 20; i++ {
			d, lat := rig.decide()
			if !d.Allowed || !errors.Is(d.Err, core.ErrBreakerOpen) {
				t.Errorf("with the breaker open: allowed %v err %v", d.Allowed, d.Err)
			}
			if lat > 5*time.Millisecond {
				t.Errorf("with the breaker open a decision took %v", lat)
			}
		}
		if _, trips := hook.snapshot(); trips != 0 {
			t.Errorf("the open breaker let %d calls through to Redis", trips)
		}
	})
}

// TestNoGoroutineLeak: calls that time out against a blackhole or fail
// against a dead server leave no goroutine behind once the client is
// closed.
func TestNoGoroutineLeak(t *testing.T) {
	addr := redistest.Blackhole(t)
	srv := redistest.Start(t)
	srv.Kill()
	baseline := runtime.NumGoroutine()
	for _, a := range []string{addr, srv.Addr()} {
		client := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		st := mustStore(t, client, Config{Timeout: 20 * time.Millisecond})
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]core.Outcome, 1)
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // a cancelled request still gets its bounded call
				for i := 0; i < 5; i++ {
					if err := st.Take(ctx, []core.Item{item("a", "k", fixed(1, time.Second), 1, false)}, out); err == nil {
						t.Error("take against a dead server succeeded")
					}
				}
			}()
		}
		wg.Wait()
		client.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeadRedisLogLine pins what an operator reads when Redis hangs: one
// line, one "quotagate: " prefix on the error, which names the store and
// the operation once.
func TestDeadRedisLogLine(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Blackhole(t), ContextTimeoutEnabled: true})
	defer client.Close()
	st := mustStore(t, client, Config{Timeout: DefaultTimeout})
	var buf bytes.Buffer
	log := logslog.New(logslog.NewTextHandler(&buf, &logslog.HandlerOptions{ReplaceAttr: func(_ []string, a logslog.Attr) logslog.Attr {
		if a.Key == logslog.TimeKey {
			return logslog.Attr{}
		}
		return a
	}}))
	eng, err := core.New(core.Config{
		Store:            st,
		Observer:         observe.MustLogger(log, observe.LoggerConfig{}),
		BreakerThreshold: -1,
		Budgets:          []core.Budget{{Name: "api", Quota: 5, Window: time.Hour, Key: constKey("client")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var d core.Decision
	eng.MustLayer(core.Use("api")).Decide(&core.Request{Method: "GET", Context: context.Background()}, &d)
	const want = `level=WARN msg="quotagate: store error" event=store_error timeout=true error="quotagate: redis store: take: context deadline exceeded"` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if got := d.Err.Error(); got != "quotagate: redis store: take: context deadline exceeded" {
		t.Errorf("Decision.Err = %q", got)
	}
}
