package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	lslog "log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSentinelFailover runs a budget through a Sentinel-managed deployment
// (redis.NewFailoverClient): it limits exactly; while the master is down
// and the Sentinel fails over, requests pass (fail-open) within the
// deadline; afterwards the store follows the promoted replica and the
// replicated count still holds.
func TestSentinelFailover(t *testing.T) {
	d := redistest.StartSentinel(t, "quotagate", 1)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            d.Name,
		SentinelAddrs:         []string{d.Sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	const deadline = 300 * time.Millisecond
	// The store's clock starts at the top of an hour, so the rig's one-hour
	// window cannot roll over during the failover.
	clock := runningClock{base: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), start: time.Now()}
	useFakeTime(t, client, clock, 0)
	st := mustStore(t, client, Config{Prefix: "sentinel:", Timeout: deadline})
	rig := newFaultRig(t, st, core.Config{BreakerCooldown: 200 * time.Millisecond})
	rig.expectLimiting(t) // 5 admitted, the 6th denied

	ctx := context.Background()
	// The count reaches the replica before the master dies, so the
	// failover must not hand the client a fresh budget.
	if n, err := client.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	d.Master.Kill()

	start := time.Now()
	failedOpen := 0
	for {
		dec, took := rig.decide()
		if took > deadline+latencySlack {
			t.Fatalf("a decision during the failover took %v (deadline %v)", took, deadline)
		}
		if dec.Err == nil {
			if dec.Allowed {
				t.Fatalf("after the failover the spent budget admitted a request: %+v", dec.Results)
			}
			break
		}
		if !dec.Allowed {
			t.Fatalf("a decision during the failover was denied: %v", dec.Err)
		}
		failedOpen++
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the store did not reach the promoted replica within 30s: %v", dec.Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, want := d.MasterAddr(), d.Replicas[0].Addr(); got != want {
		t.Fatalf("sentinel reports master %s, want the promoted replica %s", got, want)
	}
	if failedOpen == 0 {
		t.Fatal("no decision failed open: the master's death was not observed")
	}
	if rig.obs.errs.Load() == 0 {
		t.Fatal("no store error reached the observer")
	}
	t.Logf("failover took %v; %d decisions failed open meanwhile", time.Since(start).Round(time.Millisecond), failedOpen)
}

// runningClock reads a chosen instant plus the real time elapsed since it
// was made.
type runningClock struct {
	base  time.Time
	start time.Time
}

func (c runningClock) Now() time.Time { return c.base.Add(time.Since(c.start)) }

// The budgets the failover tests charge: a fixed window and a token bucket
// that never deny, at a clock that stands still, so that what a key holds
// is exactly the charges it took.
var (
	failoverFixed  = core.Limit{Algorithm: core.FixedWindow, Quota: core.MaxQuota, Window: time.Hour}
	failoverBucket = core.Limit{Algorithm: core.TokenBucket, Quota: 1e9, Burst: 1e9, Window: time.Hour}
	failoverKeys   = []string{"p0", "p1", "p2"}
)

// failoverItems returns a decision charging both budgets of key by cost.
func failoverItems(key string, cost int64) []core.Item {
	return []core.Item{
		{Budget: "fw", Key: key, Limit: failoverFixed, Cost: cost},
		{Budget: "tb", Key: key, Limit: failoverBucket, Cost: cost},
	}
}

// failoverLoad is what the load of a failover test saw.
type failoverLoad struct {
	acked   [3]atomic.Int64 // allowed Takes per key of failoverKeys
	after   atomic.Int64    // allowed Takes once the failover returned
	refused atomic.Int64    // Takes that failed with ErrFailingOver
	other   atomic.Int64    // Takes that failed otherwise
	lastErr atomic.Value
	over    atomic.Bool // the failover returned
}

// failoverUnderLoad charges st from 4 goroutines while via runs a planned
// failover of d, goes on until 300 Takes were allowed after it (or 10 s),
// and returns the promoted server, what the load saw, and what each key
// holds in the promoted server (per budget: fixed window, token bucket).
func failoverUnderLoad(t *testing.T, d *redistest.Sentinel, via *redistest.Server, st *Store, clock core.Clock) (*redistest.Server, *failoverLoad, [3][2]int64) {
	t.Helper()
	var l failoverLoad
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]core.Outcome, 2)
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(failoverKeys)
				err := st.Take(context.Background(), failoverItems(failoverKeys[k], 1), out)
				switch {
				case err == nil && out[0].Allowed && out[1].Allowed:
					l.acked[k].Add(1)
					if l.over.Load() {
						l.after.Add(1)
					}
				case err == nil:
					l.other.Add(1)
					l.lastErr.Store(fmt.Errorf("denied: %+v", out))
				case errors.Is(err, ErrFailingOver):
					l.refused.Add(1)
					time.Sleep(time.Millisecond) // as a failure mode would answer, without spinning
				default:
					l.other.Add(1)
					l.lastErr.Store(err)
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitFor(t, 10*time.Second, "200 Takes before the failover", func() bool {
		if l.other.Load() > 0 {
			t.Fatalf("a Take failed before the failover: %v", l.lastErr.Load())
		}
		return l.acked[0].Load()+l.acked[1].Load()+l.acked[2].Load() >= 200
	})
	promoted := d.Failover(via, 30*time.Second)
	l.over.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for l.after.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	// What the promoted server holds, read by Takes of cost 0 at the same
	// clock through a client of its own.
	direct := newClient(t, promoted.Addr())
	useFakeTime(t, direct, clock, 0)
	reader := mustStore(t, direct, Config{Prefix: st.prefix, MaxBatch: 1})
	var held [3][2]int64
	for k, key := range failoverKeys {
		out := make([]core.Outcome, 2)
		if err := reader.Take(context.Background(), failoverItems(key, 0), out); err != nil {
			t.Fatalf("reading %s on the promoted server: %v", key, err)
		}
		held[k] = [2]int64{failoverFixed.Quota - out[0].Remaining, failoverBucket.Burst - out[1].Remaining}
	}
	return promoted, &l, held
}

// waitFor polls cond every 10 ms and fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lostCharges compares the Takes the store allowed with what the promoted
// server holds, logs both, and returns the charges lost (allowed, not
// held) over both budgets and every key.
func lostCharges(t *testing.T, l *failoverLoad, held [3][2]int64) int64 {
	t.Helper()
	var lost, lostTakes, acked int64
	for k := range failoverKeys {
		a := l.acked[k].Load()
		acked += a
		for b := range held[k] {
			if d := a - held[k][b]; d > 0 {
				lost += d
			}
		}
		if d := a - min(held[k][0], held[k][1]); d > 0 {
			lostTakes += d
		}
	}
	t.Logf("allowed %d Takes of 2 budgets (%d after the failover), refused %d with ErrFailingOver, %d other errors (last: %v); "+
		"the new master holds %v; lost %d of %d charges (%d Takes)",
		acked, l.after.Load(), l.refused.Load(), l.other.Load(), l.lastErr.Load(), held, lost, 2*acked, lostTakes)
	return lost
}

// failoverStore returns a store on a failover client of d whose scripts
// run at clock, watching sentinels when not nil.
func failoverStore(t *testing.T, d *redistest.Sentinel, clock core.Clock, watch *SentinelWatch) *Store {
	t.Helper()
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            d.Name,
		SentinelAddrs:         []string{d.Sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	useFakeTime(t, client, clock, 0)
	st := mustStore(t, client, Config{Prefix: "fo:", Sentinel: watch})
	t.Cleanup(func() { st.Close() })
	return st
}

// TestSentinelPlannedFailover charges a fixed window and a token bucket
// from 4 goroutines through a failover client while SENTINEL FAILOVER
// promotes the replica, and counts the charges the store acknowledged
// that the new master does not hold. Without a SentinelWatch some are lost
// (logged, not asserted: how many depends on the machine); with one, none
// is, the calls of the failover's window fail with ErrFailingOver, and
// the store decides on the new master afterwards.
func TestSentinelPlannedFailover(t *testing.T) {
	clock := newFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro())
	t.Run("unwatched", func(t *testing.T) {
		d := redistest.StartSentinel(t, "quotagate", 1)
		st := failoverStore(t, d, clock, nil)
		_, l, held := failoverUnderLoad(t, d, d.Sentinel, st, clock)
		if lost := lostCharges(t, l, held); lost == 0 {
			t.Log("no charge lost without the watch this time")
		}
	})
	t.Run("watched", func(t *testing.T) {
		d := redistest.StartSentinel(t, "quotagate", 1)
		var logs syncBuffer
		st := failoverStore(t, d, clock, &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: d.Name,
			Logger: lslog.New(lslog.NewTextHandler(&logs, nil))})
		promoted, l, held := failoverUnderLoad(t, d, d.Sentinel, st, clock)
		if lost := lostCharges(t, l, held); lost != 0 {
			t.Errorf("%d charges the store acknowledged are not on the new master", lost)
		}
		checkWatched(t, st, promoted, l, &logs)
	})
}

// TestSentinelFailoverOnAnotherSentinel runs the failover on a Sentinel
// the watch was not given, which it finds through the one it was given;
// the failover client listens to the other, which learns of the new master
// later: the store waits until the client has left the old master.
func TestSentinelFailoverOnAnotherSentinel(t *testing.T) {
	clock := newFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro())
	d := redistest.StartSentinels(t, "quotagate", 1, 2)
	var logs syncBuffer
	st := failoverStore(t, d, clock, &SentinelWatch{Addrs: []string{d.Sentinels[0].Addr()}, MasterName: d.Name,
		Logger: lslog.New(lslog.NewTextHandler(&logs, nil))})
	waitFor(t, 10*time.Second, "the watch of the second Sentinel", func() bool {
		return strings.Contains(logs.String(), d.Sentinels[1].Addr())
	})
	promoted, l, held := failoverUnderLoad(t, d, d.Sentinels[1], st, clock)
	if lost := lostCharges(t, l, held); lost != 0 {
		t.Errorf("%d charges the store acknowledged are not on the new master", lost)
	}
	checkWatched(t, st, promoted, l, &logs)
}

// checkWatched checks what a failover under a watch left: calls refused
// with ErrFailingOver, decisions on the new master after it, and log lines
// for both.
func checkWatched(t *testing.T, st *Store, promoted *redistest.Server, l *failoverLoad, logs *syncBuffer) {
	t.Helper()
	if l.refused.Load() == 0 {
		t.Error("no call was refused with ErrFailingOver during the failover")
	}
	if l.after.Load() == 0 {
		t.Error("the store allowed no Take after the failover")
	}
	info, err := st.client.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infoValue(info, "run_id"), infoValue(promoted.CLI("INFO", "server"), "run_id"); got != want {
		t.Errorf("the store's client reaches run_id %s, not the new master's %s", got, want)
	}
	t.Logf("the store's log:\n%s", logs.String())
	for _, want := range []string{"every store call is refused", "Sentinel failover over"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line saying %q:\n%s", want, logs.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSentinelWatchEvents drives a watcher with Sentinel's events, as
// its goroutine would, on a store of a plain server: the events of
// another master are ignored; +elected-leader makes every call fail with
// ErrFailingOver, which the engine applies the budget's failure mode to
// and logs; an abort ends it; +switch-master ends it only once the client
// leaves the old master, or, failing that, at MaxRefusal, with an error
// logged.
func TestSentinelWatchEvents(t *testing.T) {
	srv, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "ev:"})
	var logs syncBuffer
	st.watch = newWatch(st, &SentinelWatch{Addrs: []string{"127.0.0.1:1"}, MasterName: "m", MaxRefusal: 300 * time.Millisecond,
		Logger: lslog.New(lslog.NewTextHandler(&logs, nil))})
	defer st.Close()
	w := st.watch.add("127.0.0.1:1") // not run: the test is its goroutine
	_, port, _ := net.SplitHostPort(srv.Addr())
	master := "master m 127.0.0.1 " + port
	eng, err := core.New(core.Config{Store: st, BreakerThreshold: -1, Logger: lslog.New(lslog.NewTextHandler(&logs, nil)),
		Budgets: []core.Budget{{Name: "api", Quota: 100, Window: time.Hour, Key: constKey("c"), FailureMode: core.FailClosed}}})
	if err != nil {
		t.Fatal(err)
	}
	layer := eng.MustLayer(core.Use("api"))
	take := func() error {
		out := make([]core.Outcome, 2)
		return st.Take(context.Background(), failoverItems("k", 1), out)
	}
	if err := take(); err != nil {
		t.Fatal(err)
	}

	w.event("+elected-leader", "master other 127.0.0.1 "+port)
	w.event("+selected-slave", "slave 127.0.0.1:7 127.0.0.1 7 @ other 127.0.0.1 "+port)
	if err := take(); err != nil {
		t.Fatalf("another master's failover refused a call: %v", err)
	}

	w.event("+elected-leader", master)
	if err := take(); !errors.Is(err, ErrFailingOver) {
		t.Fatalf("during the failover: %v, want ErrFailingOver", err)
	}
	var d core.Decision
	layer.Decide(&core.Request{Method: "GET", Context: context.Background()}, &d)
	if d.Allowed || d.Reason != core.ReasonUnavailable || !errors.Is(d.Err, ErrFailingOver) {
		t.Fatalf("a fail-closed budget during the failover: allowed %v, reason %v, err %v", d.Allowed, d.Reason, d.Err)
	}
	if !strings.Contains(logs.String(), "failing over: a Sentinel is promoting a replica") {
		t.Errorf("the engine did not log the refusal:\n%s", logs.String())
	}
	outs := make([]core.Outcome, 2)
	outs[0].Charged, outs[1].Charged = true, true
	if err := st.Refund(context.Background(), failoverItems("k", 1), outs); !errors.Is(err, ErrFailingOver) {
		t.Fatalf("a refund during the failover: %v, want ErrFailingOver", err)
	}
	if err := st.Peek(context.Background(), failoverItems("k", 1), outs); !errors.Is(err, ErrFailingOver) {
		t.Fatalf("a peek during the failover: %v, want ErrFailingOver", err)
	}
	w.event("-failover-abort-slave-timeout", master)
	if err := take(); err != nil {
		t.Fatalf("after the abort: %v", err)
	}

	// The new master is elsewhere, and the client stays on the old one:
	// the store goes on refusing until MaxRefusal.
	w.event("+selected-slave", "slave 127.0.0.1:7 127.0.0.1 7 @ m 127.0.0.1 "+port)
	w.event("+switch-master", "m 127.0.0.1 "+port+" 127.0.0.1 7")
	w.tick()
	if err := take(); !errors.Is(err, ErrFailingOver) {
		t.Fatalf("with the client on the old master after +switch-master: %v, want ErrFailingOver", err)
	}
	time.Sleep(350 * time.Millisecond)
	w.tick()
	if err := take(); err != nil {
		t.Fatalf("after MaxRefusal: %v", err)
	}
	if !strings.Contains(logs.String(), "not over after Sentinel.MaxRefusal") {
		t.Errorf("no error logged at MaxRefusal:\n%s", logs.String())
	}

	// The client reaches another server than when the failover began
	// (here: the old master's run_id is made up): +switch-master ends it.
	// So does it when the old master's run_id is unknown (it did not
	// answer when the failover began).
	for _, old := range []string{"0123456789abcdef0123456789abcdef01234567", ""} {
		w.event("+elected-leader", "master m 127.0.0.1 1")
		if err := take(); !errors.Is(err, ErrFailingOver) {
			t.Fatalf("during the failover: %v, want ErrFailingOver", err)
		}
		w.oldRunID = old
		w.event("+switch-master", "m 127.0.0.1 1 127.0.0.1 "+port)
		if err := take(); err != nil {
			t.Fatalf("after the switch (old run_id %q): %v", old, err)
		}
	}
}

// TestSentinelWatchReconnects kills the watch's subscription on the
// Sentinel: the store logs it, subscribes again and says so; Close ends
// its subscriptions and goroutines.
func TestSentinelWatchReconnects(t *testing.T) {
	d := redistest.StartSentinel(t, "quotagate", 0)
	client := newClient(t, d.Master.Addr())
	pubsub := func() int {
		out := d.Sentinel.CLI("CLIENT", "LIST", "TYPE", "pubsub")
		if out == "" {
			return 0
		}
		return len(strings.Split(out, "\n"))
	}
	baseline := runtime.NumGoroutine()
	var logs syncBuffer
	st := mustStore(t, client, Config{Prefix: "rc:", Sentinel: &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: d.Name,
		Logger: lslog.New(lslog.NewTextHandler(&logs, nil))}})
	waitFor(t, 10*time.Second, "the watch's subscription", func() bool { return pubsub() == 1 })
	d.Sentinel.CLI("CLIENT", "KILL", "TYPE", "pubsub")
	waitFor(t, 10*time.Second, "the watch to subscribe again", func() bool {
		return pubsub() == 1 && strings.Contains(logs.String(), "watching a Sentinel for failovers again")
	})
	if !strings.Contains(logs.String(), "cannot watch a Sentinel") {
		t.Errorf("the lost subscription was not logged:\n%s", logs.String())
	}
	out := make([]core.Outcome, 2)
	if err := st.Take(context.Background(), failoverItems("k", 1), out); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the subscription to end", func() bool { return pubsub() == 0 })
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before New:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinelWatchCatchesUp: a watcher that held the store's calls when
// its subscription broke, and finds on subscribing again that the
// Sentinel has no failover under way and the same master, sends calls
// again.
func TestSentinelWatchCatchesUp(t *testing.T) {
	d := redistest.StartSentinel(t, "quotagate", 0)
	client := newClient(t, d.Master.Addr())
	st := mustStore(t, client, Config{Prefix: "cu:"})
	var logs syncBuffer
	st.watch = newWatch(st, &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: d.Name, Logger: lslog.New(lslog.NewTextHandler(&logs, nil))})
	defer st.Close()
	w := st.watch.add(d.Sentinel.Addr()) // not run: the test is its goroutine
	w.event("+elected-leader", "master "+d.Name+" 127.0.0.1 "+strconv.Itoa(d.Master.Port()))
	out := make([]core.Outcome, 2)
	if err := st.Take(context.Background(), failoverItems("k", 1), out); !errors.Is(err, ErrFailingOver) {
		t.Fatalf("during the failover: %v, want ErrFailingOver", err)
	}
	w.resync()
	if err := st.Take(context.Background(), failoverItems("k", 1), out); err != nil {
		t.Fatalf("after catching up: %v", err)
	}
}

// TestSentinelWatchDeadConnection: a Sentinel connection that accepts and
// never answers is replaced after its PING goes unanswered, and logged.
func TestSentinelWatchDeadConnection(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "dc:"})
	var logs syncBuffer
	hole := redistest.Blackhole(t)
	st.watch = newWatch(st, &SentinelWatch{Addrs: []string{hole}, MasterName: "m", Logger: lslog.New(lslog.NewTextHandler(&logs, nil))})
	defer st.Close()
	st.watch.start()
	start := time.Now()
	waitFor(t, 15*time.Second, "the dead connection to be noticed", func() bool {
		return strings.Contains(logs.String(), "no answer to PING")
	})
	t.Logf("noticed after %v", time.Since(start).Round(time.Millisecond))
}

// TestSentinelWatchConfig: New reports every problem of a SentinelWatch
// at once, a Sentinel that monitors no such master, and a client that
// does not reach the master the Sentinels name.
func TestSentinelWatchConfig(t *testing.T) {
	d := redistest.StartSentinel(t, "quotagate", 1)
	client := newClient(t, d.Master.Addr())
	_, err := New(client, Config{Sentinel: &SentinelWatch{Addrs: []string{"nohost"}, MaxRefusal: -1}})
	for _, want := range []string{"address \"nohost\"", "MasterName is empty", "MaxRefusal must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v; want an error saying %q", err, want)
		}
	}
	if _, err := New(client, Config{Sentinel: &SentinelWatch{MasterName: "quotagate"}}); err == nil || !strings.Contains(err.Error(), "Addrs is empty") {
		t.Errorf("New without addresses: %v", err)
	}
	_, err = New(client, Config{Sentinel: &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: "other"}})
	if err == nil || !strings.Contains(err.Error(), "No such master") {
		t.Errorf("New with an unknown master name: %v", err)
	}
	_, err = New(newClient(t, d.Replicas[0].Addr()), Config{Sentinel: &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: d.Name}})
	if err == nil || !strings.Contains(err.Error(), "redis.NewFailoverClient") {
		t.Errorf("New with a client of the replica: %v", err)
	}
	st, err := New(client, Config{Sentinel: &SentinelWatch{Addrs: []string{d.Sentinel.Addr()}, MasterName: d.Name}})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}
