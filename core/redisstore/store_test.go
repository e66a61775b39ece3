package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/redis/go-redis/v9"
)

// countingHook counts the commands a client sends, by name, and the
// round trips (a pipeline is one).
type countingHook struct {
	mu         sync.Mutex
	commands   map[string]int
	roundTrips int
}

func newCountingHook() *countingHook { return &countingHook{commands: map[string]int{}} }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.commands[cmd.Name()]++
		h.roundTrips++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			h.commands[c.Name()]++
		}
		h.roundTrips++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *countingHook) reset() {
	h.mu.Lock()
	clear(h.commands)
	h.roundTrips = 0
	h.mu.Unlock()
}

func (h *countingHook) snapshot() (map[string]int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]int{}
	for k, v := range h.commands {
		m[k] = v
	}
	return m, h.roundTrips
}

// TestOneRoundTrip: a decision over 1, 3 and 5 budgets is one FCALL on a
// single node, counted both by the server (INFO commandstats) and by a
// client hook.
func TestOneRoundTrip(t *testing.T) {
	_, client := startServer(t)
	hook := newCountingHook()
	client.AddHook(hook)
	st := mustStore(t, client, Config{Prefix: "rt:"})
	var budgets []core.Budget
	algs := []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.SlidingLog, core.TokenBucket, core.LeakyBucket}
	for i, alg := range algs {
		b := core.Budget{Name: fmt.Sprintf("b%d", i), Algorithm: alg, Quota: 100, Window: time.Minute, Key: constKey(fmt.Sprintf("k%d", i))}
		if alg == core.LeakyBucket {
			b.MaxWait, b.Burst = time.Second, 100
		}
		budgets = append(budgets, b)
	}
	eng, err := core.New(core.Config{Store: st, Budgets: budgets})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{1, 3, 5} {
		names := make([]string, n)
		for i := range names {
			names[i] = budgets[i].Name
		}
		layer := eng.MustLayer(core.Use(names...))
		decide := func() core.Decision {
			req := core.Request{Method: "GET", Path: "/", Context: ctx}
			var d core.Decision
			layer.Decide(&req, &d)
			if d.Err != nil || !d.Allowed || len(d.Results) != n {
				t.Fatalf("decision over %d budgets: allowed %v, %d results, err %v", n, d.Allowed, len(d.Results), d.Err)
			}
			return d
		}
		decide() // loads the library if needed
		hook.reset()
		before, evalBefore := commandCalls(t, client, "fcall"), commandCalls(t, client, "evalsha")+commandCalls(t, client, "eval")
		hook.reset() // INFO went through the hook
		const decisions = 10
		for i := 0; i < decisions; i++ {
			decide()
		}
		cmds, trips := hook.snapshot()
		if trips != decisions || cmds["fcall"] != decisions || len(cmds) != 1 {
			t.Errorf("%d budgets: %d decisions made %d round trips, commands %v; want one FCALL each", n, decisions, trips, cmds)
		}
		after, evalAfter := commandCalls(t, client, "fcall"), commandCalls(t, client, "evalsha")+commandCalls(t, client, "eval")
		if after-before != decisions || evalAfter != evalBefore {
			t.Errorf("%d budgets: server counted %d FCALL and %d EVALSHA or EVAL for %d decisions", n, after-before, evalAfter-evalBefore, decisions)
		}
	}
}

// noFunctionsArgs start a redis-server that refuses FCALL and FUNCTION as
// unknown commands, as a server older than Redis 7.0 does.
var noFunctionsArgs = []string{"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}

// TestScriptFlush: after FUNCTION FLUSH and SCRIPT FLUSH (as after a
// restart without persistence) the store loads its library again and
// carries on; on a server without functions it runs its scripts by
// EVALSHA and reloads them after SCRIPT FLUSH.
func TestScriptFlush(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		flush     [][]string
		cmd, none string // the command that runs decisions, and one that must not
	}{
		{"functions", nil, [][]string{{"FUNCTION", "FLUSH"}, {"SCRIPT", "FLUSH"}}, "fcall", "evalsha"},
		{"no functions", noFunctionsArgs, [][]string{{"SCRIPT", "FLUSH"}}, "evalsha", "fcall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			client := newClient(t, srv.Addr())
			st := mustStore(t, client, Config{Prefix: "flush:"})
			ctx := context.Background()
			flush := func() {
				for _, f := range tc.flush {
					srv.CLI(f...)
				}
			}
			l := fixed(3, time.Hour)
			windowtest.ClearOfEdge(t, time.Hour)
			items := []core.Item{item("a", "k", l, 1, false), item("b", "k", l, 1, false)}
			out := make([]core.Outcome, 2)
			for i := 0; i < 3; i++ {
				flush()
				if err := st.Take(ctx, items, out); err != nil {
					t.Fatalf("take %d after the flush: %v", i, err)
				}
				if !out[0].Charged || out[0].Remaining != int64(2-i) {
					t.Fatalf("take %d: %+v", i, out[0])
				}
				flush()
				if err := st.Refund(ctx, items, out); err != nil {
					t.Fatalf("refund after the flush: %v", err)
				}
				if err := st.Take(ctx, items, out); err != nil {
					t.Fatal(err)
				}
				if out[0].Remaining != int64(2-i) {
					t.Fatalf("refund %d was not applied: %+v", i, out[0])
				}
			}
			if n := commandCalls(t, client, tc.cmd); n < 9 {
				t.Errorf("the server ran %d %s for 9 calls", n, strings.ToUpper(tc.cmd))
			}
			if n := commandCalls(t, client, tc.none); n != 0 {
				t.Errorf("the server ran %d %s", n, strings.ToUpper(tc.none))
			}
			if got := st.noFunctions.Load(); got != (tc.cmd == "evalsha") {
				t.Errorf("noFunctions = %v", got)
			}
			// Another store (another instance) finds the library loaded.
			for i := 0; i < 2; i++ {
				if err := mustStore(t, client, Config{Prefix: "flush:"}).Preload(ctx); err != nil {
					t.Errorf("Preload with the library loaded: %v", err)
				}
			}
		})
	}
}

func TestScriptFlushCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	client := newClusterClient(t, cl.Addrs())
	hook := newCountingHook()
	client.AddHook(hook)
	ka, kb := crossSlotKeys(t, client)
	st := mustStore(t, client, Config{Prefix: "flushc:"})
	ctx := context.Background()
	l := fixed(3, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	items := []core.Item{item("a", ka, l, 1, false), item("b", kb, l, 1, false)}
	out := make([]core.Outcome, 2)
	for i := 0; i < 3; i++ {
		for _, n := range cl.Nodes {
			n.CLI("FUNCTION", "FLUSH")
			n.CLI("SCRIPT", "FLUSH")
		}
		if err := st.Take(ctx, items, out); err != nil {
			t.Fatalf("take %d after SCRIPT FLUSH: %v", i, err)
		}
		for j, o := range out {
			if !o.Charged || o.Remaining != int64(2-i) {
				t.Fatalf("take %d item %d: %+v", i, j, o)
			}
		}
	}
	// Scripts loaded: one pipelined round trip per take.
	hook.reset()
	if err := st.Refund(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if cmds, trips := hook.snapshot(); trips != 2 || cmds["fcall"] != 4 {
		t.Errorf("refund + take across 2 slots: %d round trips, commands %v; want 2 pipelines of 2 FCALL", trips, cmds)
	}
	if out[0].Remaining != 0 || out[1].Remaining != 0 {
		t.Errorf("refund then take: %+v", out)
	}
}

func TestNewValidates(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	good := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer good.Close()

	if _, err := New(plain, Config{}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("client without ContextTimeoutEnabled: err = %v", err)
	}
	if _, err := New(plain, Config{Timeout: -1}); err != nil {
		t.Errorf("negative timeout accepts any client: %v", err)
	}
	_, err := New(good, Config{Prefix: "a{b}:"})
	var ce *core.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("prefix with braces: err = %v", err)
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("nil client accepted")
	}
	s, err := New(good, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.prefix != DefaultPrefix || s.timeout != DefaultTimeout {
		t.Errorf("defaults: prefix %q timeout %v", s.prefix, s.timeout)
	}
}

func TestTakeRejectsBadItems(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "bad:"})
	ctx := context.Background()
	cases := []core.Item{
		item("a", "k", core.Limit{Algorithm: 9, Quota: 1, Window: time.Second}, 1, false),
		item("a", "k", fixed(1, 1500*time.Microsecond), 1, false),
		item("a", "k", fixed(0, time.Second), 1, false),
		item("a", "k", fixed(1, time.Second), -1, false),
		item("a", "k", token(1, time.Second, 0), 1, false),
		// burst × interval beyond 2^50 µs: GCRA's times would leave the
		// range doubles hold exactly.
		item("a", "k", token(1, time.Hour, 400_000), 1, false),
		item("a", "k", leaky(1, time.Second, 1, 40*365*24*time.Hour), 1, false),
		item("a", "k", fixed(1, 40*365*24*time.Hour), 1, false),
	}
	out := make([]core.Outcome, 1)
	for _, it := range cases {
		if err := st.Take(ctx, []core.Item{it}, out); err == nil {
			t.Errorf("Take(%+v) accepted", it)
		}
	}
	// The same budget twice for one key: one of the two charges would be
	// lost.
	twice := []core.Item{item("a", "k", fixed(5, time.Second), 1, false), item("b", "k", fixed(5, time.Second), 1, false), item("a", "k", fixed(5, time.Second), 1, false)}
	if err := st.Take(ctx, twice, make([]core.Outcome, 3)); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("a take repeating budget a for key k: %v", err)
	}
	if keys := keysWith(t, client, "bad:"); len(keys) != 0 {
		t.Errorf("rejected takes wrote %v", keys)
	}
	if err := st.Take(ctx, []core.Item{cases[0]}, nil); err == nil {
		t.Error("Take with short out accepted")
	}
	if err := st.Take(ctx, nil, nil); err != nil {
		t.Errorf("empty Take: %v", err)
	}
	if err := st.Refund(ctx, nil, nil); err != nil {
		t.Errorf("empty Refund: %v", err)
	}
}

// TestChangedLimits: a changed quota applies to the existing state at once;
// a changed algorithm or window starts afresh.
func TestChangedLimits(t *testing.T) {
	_, client := startServer(t)
	clock := newFakeClock(t0)
	useFakeTime(t, client, clock, 0)
	st := mustStore(t, client, Config{Prefix: "chg:"})
	ctx := context.Background()
	take := func(l core.Limit, cost int64) core.Outcome {
		out := make([]core.Outcome, 1)
		if err := st.Take(ctx, []core.Item{item("b", "k", l, cost, false)}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	if o := take(fixed(10, time.Minute), 8); o.Remaining != 2 {
		t.Fatalf("first take: %+v", o)
	}
	if o := take(fixed(12, time.Minute), 1); o.Remaining != 3 {
		t.Errorf("quota raised to 12 after 8 spent, cost 1: remaining %d, want 3", o.Remaining)
	}
	if o := take(fixed(5, time.Minute), 1); o.Allowed || o.Remaining != 0 {
		t.Errorf("quota lowered below use: %+v, want denied", o)
	}
	if o := take(fixed(5, 2*time.Minute), 1); !o.Allowed || o.Remaining != 4 {
		t.Errorf("window changed: %+v, want a fresh window", o)
	}
	if o := take(slidingLog(5, 2*time.Minute), 2); !o.Allowed || o.Remaining != 3 {
		t.Errorf("algorithm changed to sliding log: %+v, want a fresh log", o)
	}
	if o := take(fixed(5, 2*time.Minute), 1); !o.Allowed || o.Remaining != 4 {
		t.Errorf("algorithm changed back: %+v, want a fresh window", o)
	}
}

func TestKeys(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "app:rl:"})
	if got := st.Key("tenant:42"); got != "app:rl:{tenant:42}#h" {
		t.Errorf("Key = %q", got)
	}
	if got := st.LogKey("t_mutate", "tenant:42"); got != "app:rl:{tenant:42}:t_mutate" {
		t.Errorf("LogKey = %q", got)
	}
	long := strings.Repeat("a", 65)
	for _, p := range []string{"", "has space", "br{ace}", "x}y", long, "ünï", "#abc", "a\x00b"} {
		k := st.LogKey("b", p)
		if !strings.HasPrefix(k, "app:rl:{#") || !strings.HasSuffix(k, "}:b") || len(k) != len("app:rl:{}:b")+33 {
			t.Errorf("LogKey(%q) = %q: want a hashed tag", p, k)
		}
		if pk := st.Key(p); strings.TrimSuffix(pk, "#h")+":b" != k || !strings.HasSuffix(pk, "}#h") {
			t.Errorf("Key(%q) = %q, LogKey %q", p, pk, k)
		}
	}
	if st.Key("has space") == st.Key("has  space") {
		t.Error("distinct partitions share a key")
	}
	if k := st.LogKey("b", strings.Repeat("a", 64)); k != "app:rl:{"+strings.Repeat("a", 64)+"}:b" {
		t.Errorf("64-byte safe partition was hashed: %q", k)
	}
	// Budget names may hold braces: the tag is still the partition.
	if k := st.LogKey("we{ird}", "p"); k != "app:rl:{p}:we{ird}" {
		t.Errorf("LogKey = %q", k)
	}
}

// TestSlotOf checks the CRC16 against the Redis Cluster specification's
// test vector and against the servers of a cluster.
func TestSlotOf(t *testing.T) {
	if got := slotOf("123456789"); got != 0x31C3&16383 {
		t.Errorf("slotOf(123456789) = %d, want %d", got, 0x31C3&16383)
	}
	if testing.Short() {
		return
	}
	cl := redistest.StartCluster(t, 3)
	c := newClusterClient(t, cl.Addrs())
	st := mustStore(t, c, Config{})
	ctx := context.Background()
	for _, p := range []string{"tenant:42", "has space", "2001:db8::1", "k", "", strings.Repeat("z", 80)} {
		k := st.LogKey("budget", p)
		want, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, a, b := buildKey(st.prefix, p, "budget")
		if got := slotOf(k[a:b]); int64(got) != want {
			t.Errorf("slot of %q = %d, Redis says %d", k, got, want)
		}
	}
}
