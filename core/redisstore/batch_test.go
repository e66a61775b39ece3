package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/redis/go-redis/v9"
)

// gateHook holds script runs (FCALL, EVALSHA and EVAL) at a gate while one is
// set, so that a test can let Takes queue behind a run in flight. A held
// run goes on when the gate opens, or fails when its context ends (unless
// the hook ignores contexts).
type gateHook struct {
	mu        sync.Mutex
	gate      chan struct{}
	ignoreCtx bool
	waiting   atomic.Int32
	scripts   atomic.Int32
	fcall     atomic.Int32
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "fcall" || n == "evalsha" || n == "eval" {
			h.scripts.Add(1)
			if n == "fcall" {
				h.fcall.Add(1)
			}
			h.mu.Lock()
			g, ignore := h.gate, h.ignoreCtx
			h.mu.Unlock()
			if g != nil {
				h.waiting.Add(1)
				done := ctx.Done()
				if ignore {
					done = nil
				}
				select {
				case <-g:
				case <-done:
					h.waiting.Add(-1)
					cmd.SetErr(ctx.Err())
					return ctx.Err()
				}
				h.waiting.Add(-1)
			}
		}
		return next(ctx, cmd)
	}
}

// hold makes script runs wait at a gate until open.
func (h *gateHook) hold(ignoreCtx bool) {
	h.mu.Lock()
	h.gate, h.ignoreCtx = make(chan struct{}), ignoreCtx
	h.mu.Unlock()
}

func (h *gateHook) open() {
	h.mu.Lock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
	h.mu.Unlock()
}

// eventually fails the test unless cond becomes true within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// queued returns how many Takes wait in the store's queue.
func (s *Store) queued() int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue)
}

// batchRecord is one take script run as it went over the wire: its
// decisions' items and outcomes, in the order the script evaluated them.
// Items carry their partition's key in Redis and their record name, which
// partition them as the originals do.
type batchRecord struct {
	items [][]core.Item
	outs  [][]core.Outcome
}

// recordBatches makes s record every take script run, decoded from the
// command its client sent and the reply it got.
func recordBatches(s *Store) func() []batchRecord {
	var mu sync.Mutex
	var runs []batchRecord
	s.client.AddHook(wireHook{seen: func(keys []string, call, reply string) {
		r, err := decodeRun(keys, call, reply)
		if err != nil {
			panic(err)
		}
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
	}})
	return func() []batchRecord {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(runs)
	}
}

// decodeRun reads a take script run's decisions from its keys and call
// (see take.lua) and their outcomes from its reply.
func decodeRun(keys []string, call, reply string) (batchRecord, error) {
	var r batchRecord
	if len(call) < 3 || call[0] != 0 {
		return r, fmt.Errorf("take call with flags %q", call[:min(1, len(call))])
	}
	d := int(binary.LittleEndian.Uint16([]byte(call[1:3])))
	counts, kcounts := call[3:3+d], call[3+d:3+2*d]
	pos, kb := 3+2*d, 0
	i64 := func() int64 {
		v := int64(binary.LittleEndian.Uint64([]byte(call[pos : pos+8])))
		pos += 8
		return v
	}
	var batch []*pending
	for x := 0; x < d; x++ {
		items := make([]core.Item, counts[x])
		for i := range items {
			kk := int(binary.LittleEndian.Uint16([]byte(call[pos : pos+2])))
			end := pos + 2 + strings.IndexByte(call[pos+2:], 0)
			name := call[pos+2 : end]
			alg := call[end+1]
			pos = end + 2
			w, q, burst, wait, cost := i64(), i64(), i64(), i64(), i64()
			items[i] = core.Item{Budget: name, Key: keys[kb+kk%256-1], Cost: cost, Shadow: alg&16 != 0,
				Limit: core.Limit{Algorithm: core.Algorithm(alg & 15), Window: time.Duration(w) * time.Microsecond,
					Quota: q, Burst: burst, MaxWait: time.Duration(wait) * time.Microsecond}}
		}
		kb += int(kcounts[x])
		r.items = append(r.items, items)
		batch = append(batch, &pending{out: make([]core.Outcome, len(items))})
	}
	if pos != len(call) {
		return r, fmt.Errorf("take call: %d bytes left after the items", len(call)-pos)
	}
	if err := parseBatchReply(reply, batch); err != nil {
		return r, err
	}
	for _, p := range batch {
		r.outs = append(r.outs, p.out)
	}
	return r, nil
}

type takeResult struct {
	out []core.Outcome
	err error
	at  time.Duration // since the test's start
}

// startTake runs st.Take(items) on its own goroutine.
func startTake(st *Store, items []core.Item, start time.Time) <-chan takeResult {
	ch := make(chan takeResult, 1)
	go func() {
		out := make([]core.Outcome, len(items))
		err := st.Take(context.Background(), items, out)
		ch <- takeResult{out, err, time.Since(start)}
	}()
	return ch
}

// replay checks that runs, evaluated in order each at its stamp by a
// memory store, give exactly the recorded outcomes.
func replay(t *testing.T, runs []batchRecord) {
	t.Helper()
	clock := newFakeClock(0)
	mem := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
	defer mem.Close()
	ctx := context.Background()
	last := int64(0)
	for r, run := range runs {
		stamp := run.outs[0][0].Stamp
		if stamp <= last {
			t.Fatalf("run %d at %dµs follows a run at %dµs: the order of runs is not known", r, stamp, last)
		}
		last = stamp
		clock.set(stamp)
		for d, items := range run.items {
			want := make([]core.Outcome, len(items))
			if err := mem.Take(ctx, items, want); err != nil {
				t.Fatal(err)
			}
			for i := range items {
				if got := run.outs[d][i]; got != want[i] {
					t.Fatalf("run %d, decision %d, item %d (%+v):\n redis  %+v\n memory %+v", r, d, i, items[i], got, want[i])
				}
			}
		}
	}
}

// TestBatchIndependentDecisions: Takes that queue behind a run in flight go
// out as one script run that evaluates each decision on its own, in queue
// order, at one instant: a denial in one decision never charges or blocks
// another. The run recovers from FUNCTION FLUSH like any other.
func TestBatchIndependentDecisions(t *testing.T) {
	srv, client := startServer(t)
	hook := &gateHook{}
	client.AddHook(hook)
	st := mustStore(t, client, Config{Prefix: "batch:"})
	st.batch.gate = pinnedGate(1) // one run in flight: the queue order is the run order
	runs := recordBatches(st)
	l := fixed(5, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	start := time.Now()

	hook.hold(false)
	first := startTake(st, []core.Item{item("b", "x", l, 1, false)}, start)
	eventually(t, "the first Take to go out", func() bool { return hook.waiting.Load() == 1 })
	decisions := [][]core.Item{
		{item("b", "x", l, 5, false)},                              // 0: 4 left: denied
		{item("b", "y", l, 2, false)},                              // 1: allowed
		{item("b", "x", l, 1, false), item("b", "y", l, 4, false)}, // 2: y has 3: denied, x uncharged
		{item("b", "x", l, 4, false)},                              // 3: allowed, x at 0
		{item("b", "x", l, 1, false)},                              // 4: denied
		{item("b", "x", l, 1, true)},                               // 5: shadow only (x is spent): not allowed, not charged, no denial
		{item("b", "y", l, 1, false), item("b", "z", l, 1, true)},  // 6: both charged
	}
	var results []<-chan takeResult
	for i, items := range decisions {
		results = append(results, startTake(st, items, start))
		eventually(t, fmt.Sprintf("decision %d to queue", i), func() bool { return st.queued() == i+1 })
	}
	srv.CLI("FUNCTION", "FLUSH")
	hook.open()

	if r := <-first; r.err != nil || !r.out[0].Charged || r.out[0].Remaining != 4 {
		t.Fatalf("first take: %+v", r)
	}
	got := make([][]core.Outcome, len(results))
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("decision %d: %v", i, r.err)
		}
		got[i] = r.out
	}
	want := []struct{ allowed, charged []bool }{
		{[]bool{false}, []bool{false}},
		{[]bool{true}, []bool{true}},
		{[]bool{true, false}, []bool{false, false}},
		{[]bool{true}, []bool{true}},
		{[]bool{false}, []bool{false}},
		{[]bool{false}, []bool{false}},
		{[]bool{true, true}, []bool{true, true}},
	}
	stamp := got[0][0].Stamp
	for i, w := range want {
		for j := range w.allowed {
			o := got[i][j]
			if o.Allowed != w.allowed[j] || o.Charged != w.charged[j] || o.Stamp != stamp {
				t.Errorf("decision %d item %d: %+v, want allowed %v charged %v at %d", i, j, o, w.allowed[j], w.charged[j], stamp)
			}
		}
	}
	if got[2][0].Remaining != 4 || got[3][0].Remaining != 0 || got[6][0].Remaining != 2 || got[6][1].Remaining != 4 {
		t.Errorf("remaining: x uncharged %d, x after 4 %d, y %d, z %d; want 4, 0, 2, 4",
			got[2][0].Remaining, got[3][0].Remaining, got[6][0].Remaining, got[6][1].Remaining)
	}
	rs := runs()
	if len(rs) != 2 || len(rs[1].items) != len(decisions) {
		t.Fatalf("%d script runs; want the first Take, then one run of all %d queued decisions", len(rs), len(decisions))
	}
	replay(t, rs)

	// Library loaded: ten queued decisions are one FCALL.
	before, calls := commandCalls(t, client, "fcall"), hook.fcall.Load()
	hook.hold(false)
	first = startTake(st, []core.Item{item("b", "w", l, 1, false)}, start)
	eventually(t, "the first Take to go out", func() bool { return hook.waiting.Load() == 1 })
	results = results[:0]
	for i := 0; i < 10; i++ {
		results = append(results, startTake(st, []core.Item{item("b", fmt.Sprintf("v%d", i), l, 1, false)}, start))
	}
	eventually(t, "ten decisions to queue", func() bool { return st.queued() == 10 })
	hook.open()
	for _, ch := range append(results, first) {
		if r := <-ch; r.err != nil || !r.out[0].Charged {
			t.Fatalf("%+v", r)
		}
	}
	if n, s := hook.fcall.Load()-calls, commandCalls(t, client, "fcall")-before; n != 2 || s != 2 {
		t.Errorf("11 decisions, the last ten queued: the client sent %d FCALL and the server ran %d; want 2", n, s)
	}
}

// TestBatchBounds: a run holds at most MaxBatch decisions and
// maxBatchItems items; the rest of the queue goes in the next runs.
func TestBatchBounds(t *testing.T) {
	_, client := startServer(t)
	hook := &gateHook{}
	client.AddHook(hook)
	l := fixed(5, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	for _, tc := range []struct {
		name      string
		maxBatch  int
		decisions int
		items     int
		want      []int // decisions per run
	}{
		{"decisions", 4, 10, 1, []int{1, 4, 4, 2}},
		{"items", 0, 20, maxItems, []int{1, 8, 8, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mustStore(t, client, Config{Prefix: "bounds:" + tc.name + ":", MaxBatch: tc.maxBatch})
			st.batch.gate = pinnedGate(1)
			runs := recordBatches(st)
			start := time.Now()
			hook.hold(false)
			all := []<-chan takeResult{startTake(st, []core.Item{item("b", "first", l, 1, false)}, start)}
			eventually(t, "the first Take to go out", func() bool { return hook.waiting.Load() == 1 })
			for d := 0; d < tc.decisions; d++ {
				items := make([]core.Item, tc.items)
				for i := range items {
					items[i] = item(fmt.Sprintf("b%d", i), fmt.Sprintf("d%d", d), l, 1, false)
				}
				all = append(all, startTake(st, items, start))
			}
			eventually(t, "the decisions to queue", func() bool { return st.queued() == tc.decisions })
			hook.open()
			for _, ch := range all {
				if r := <-ch; r.err != nil {
					t.Fatal(r.err)
				}
			}
			var sizes []int
			for _, r := range runs() {
				sizes = append(sizes, len(r.items))
			}
			if !slices.Equal(sizes, tc.want) {
				t.Errorf("decisions per run %v, want %v", sizes, tc.want)
			}
		})
	}
}

// TestBatchDeadlines: every caller keeps its own deadline. A queued caller
// whose deadline passes before its batch goes out leaves the queue and is
// never charged; one whose batch is in flight returns at its deadline
// while the batch runs on, and its charge may still apply.
func TestBatchDeadlines(t *testing.T) {
	const timeout = 400 * time.Millisecond
	// The held run is only let go after these checks, so a caller that
	// waited for it instead of its own deadline would never return; the
	// upper bound only catches a deadline that fires late. Under -race on
	// a two-core machine at load 12 a caller returned 544 ms late.
	const slack = 2 * time.Second
	l := fixed(10, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	remaining := func(t *testing.T, st *Store, key string) int64 {
		out := make([]core.Outcome, 1)
		if err := st.Take(context.Background(), []core.Item{item("b", key, l, 0, false)}, out); err != nil {
			t.Fatal(err)
		}
		return out[0].Remaining
	}

	t.Run("queued", func(t *testing.T) {
		_, client := startServer(t)
		hook := &gateHook{}
		client.AddHook(hook)
		st := mustStore(t, client, Config{Prefix: "dl:", Timeout: timeout})
		st.batch.gate = pinnedGate(1)
		if err := st.Preload(context.Background()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		hook.hold(true) // the first run stays in flight past every deadline
		first := startTake(st, []core.Item{item("b", "a", l, 1, false)}, start)
		eventually(t, "the first Take to go out", func() bool { return hook.waiting.Load() == 1 })
		queuedAt := time.Since(start)
		r := <-startTake(st, []core.Item{item("b", "q", l, 3, false)}, start)
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("queued past its deadline: err %v", r.err)
		}
		if took := r.at - queuedAt; took < timeout-10*time.Millisecond || took > timeout+slack {
			t.Errorf("the queued caller returned after %v; its deadline was %v", took, timeout)
		}
		if n := st.queued(); n != 0 {
			t.Errorf("%d Takes still queued", n)
		}
		hook.open()
		<-first
		if n := hook.scripts.Load(); n != 1 {
			t.Errorf("%d script runs; the timed-out Take must not have been sent", n)
		}
		if got := remaining(t, st, "q"); got != 10 {
			t.Errorf("a Take that timed out in the queue was charged: remaining %d, want 10", got)
		}
	})

	t.Run("in flight", func(t *testing.T) {
		_, client := startServer(t)
		hook := &gateHook{}
		client.AddHook(hook)
		st := mustStore(t, client, Config{Prefix: "dl:", Timeout: timeout})
		st.batch.gate = pinnedGate(1)
		if err := st.Preload(context.Background()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// A goes out and is held until its deadline (400 ms), B queues at
		// 150 ms and C at 300 ms. When A fails, B and C go out together,
		// held again until the run's deadline, 400 ms from when it was
		// sent: both return with the run, at 800 ms, not 400 ms after
		// each joined the queue (550 and 700 ms).
		hook.hold(false)
		a := startTake(st, []core.Item{item("b", "a", l, 1, false)}, start)
		eventually(t, "A to go out", func() bool { return hook.waiting.Load() == 1 })
		time.Sleep(150 * time.Millisecond)
		b := startTake(st, []core.Item{item("b", "b", l, 2, false)}, start)
		time.Sleep(150 * time.Millisecond)
		c := startTake(st, []core.Item{item("b", "c", l, 3, false)}, start)
		ra := <-a
		if !errors.Is(ra.err, context.DeadlineExceeded) {
			t.Fatalf("A: %+v", ra)
		}
		for name, ch := range map[string]<-chan takeResult{"B": b, "C": c} {
			r := <-ch
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("%s: %+v", name, r)
			}
			if took := r.at - ra.at; took < timeout-10*time.Millisecond || took > timeout+slack {
				t.Errorf("%s returned %v after A; its batch went out then, with a deadline of %v", name, took, timeout)
			}
		}
		if n := hook.scripts.Load(); n != 2 {
			t.Errorf("%d script runs, want 2 (A, then B and C together)", n)
		}
		hook.open()
		if got := remaining(t, st, "b"); got != 10 {
			t.Errorf("B: remaining %d, want 10 (its run never reached the server)", got)
		}
	})
}

// TestBatchErrorReachesEveryCaller: when a batch's script run fails (here
// a real OOM from the server), every caller in it gets the error; the
// store carries on once the server recovers.
func TestBatchErrorReachesEveryCaller(t *testing.T) {
	srv, client := startServer(t)
	hook := &gateHook{}
	client.AddHook(hook)
	st := mustStore(t, client, Config{Prefix: "err:"})
	st.batch.gate = pinnedGate(1)
	if err := st.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := fixed(10, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	start := time.Now()
	hook.hold(false)
	all := []<-chan takeResult{startTake(st, []core.Item{item("b", "a", l, 1, false)}, start)}
	eventually(t, "the first Take to go out", func() bool { return hook.waiting.Load() == 1 })
	for i := 0; i < 5; i++ {
		all = append(all, startTake(st, []core.Item{item("b", fmt.Sprintf("k%d", i), l, 1, false), item("c", "x", l, 1, false)}, start))
	}
	eventually(t, "five decisions to queue", func() bool { return st.queued() == 5 })
	srv.CLI("CONFIG", "SET", "maxmemory", "1")
	hook.open()
	for i, ch := range all {
		if r := <-ch; r.err == nil || !strings.Contains(r.err.Error(), "OOM") {
			t.Errorf("caller %d: err %v, want the server's OOM error", i, r.err)
		}
	}
	if n := hook.scripts.Load(); n != 2 {
		t.Errorf("%d script runs, want 2 (the first Take, then one batch)", n)
	}
	srv.CLI("CONFIG", "SET", "maxmemory", "0")
	out := make([]core.Outcome, 1)
	if err := st.Take(context.Background(), []core.Item{item("c", "x", l, 1, false)}, out); err != nil || out[0].Remaining != 9 {
		t.Fatalf("after the server recovered: %+v, %v (nothing was charged before)", out[0], err)
	}
}

// TestBatchDifferential drives one store from many goroutines, so that
// decisions batch, over few keys with every algorithm (a budget's
// algorithm changes between decisions, within a batch too), shadow items
// and multi-item decisions, on the server's clock. Every run's decisions,
// replayed in the order the server ran them (by their stamps; runs never
// overlap on a single server) through the memory store, give exactly the
// same outcomes.
func TestBatchDifferential(t *testing.T) {
	_, client := startServer(t)
	batchDifferential(t, client, []string{"k1", "k2", "has space"}, diffBudgets, 3)
}

// TestBatchDifferentialHotKey is TestBatchDifferential with every decision
// of one item on one key: a batch's decisions of one budget follow one
// another, and each reads the record the one before it charged and has
// not written yet; windows of 20 and 40 ms move the key's expiry within
// batches.
func TestBatchDifferentialHotKey(t *testing.T) {
	_, client := startServer(t)
	batchDifferential(t, client, []string{"hot"}, []diffBudget{
		{"fw", []core.Limit{fixed(6, 40*time.Millisecond), fixed(4, 20*time.Millisecond)}},
		{"tb", []core.Limit{token(200, time.Second, 4), leaky(100, time.Second, 2, 15*time.Millisecond)}},
	}, 1)
}

// diffBudgets are the budgets of TestBatchDifferential: every algorithm,
// and budgets whose algorithm or window changes between decisions.
var diffBudgets = []diffBudget{
	{"fw", []core.Limit{fixed(6, 40*time.Millisecond), fixed(4, 40*time.Millisecond)}},
	{"sw", []core.Limit{sliding(8, 60*time.Millisecond)}},
	{"sl", []core.Limit{slidingLog(5, 30*time.Millisecond), fixed(5, 30*time.Millisecond)}},
	{"tb", []core.Limit{token(200, time.Second, 4), leaky(100, time.Second, 2, 15*time.Millisecond)}},
	{"mx", []core.Limit{fixed(3, 20*time.Millisecond), sliding(3, 20*time.Millisecond), slidingLog(3, 20*time.Millisecond), token(100, time.Second, 3)}},
}

// TestBatchDifferentialRing is TestBatchDifferential on a go-redis Ring of
// two servers, over keys the Ring puts on one shard: the store batches
// them through that shard's batcher, and the Ring sends each run there.
func TestBatchDifferentialRing(t *testing.T) {
	ring := newRing(t, 2)
	var keys []string
	var shard *redis.Client
	for i := 0; len(keys) < 3; i++ {
		k := "k" + strconv.Itoa(i)
		c, err := ring.GetShardClientForKey(partitionTag(k))
		if err != nil {
			t.Fatal(err)
		}
		if shard == nil {
			shard = c
		}
		if c == shard {
			keys = append(keys, k)
		}
	}
	batchDifferential(t, ring, keys, diffBudgets, 3)
}

// batchDifferential is TestBatchDifferential on client, over keys that
// one server holds, with decisions of 1 to most items of budgets.
func batchDifferential(t *testing.T, client redis.UniversalClient, keys []string, budgets []diffBudget, most int) {
	st := mustStore(t, client, Config{Prefix: "bdiff:"})
	runs := recordBatches(st)
	workers, perWorker := 24, 150
	if testing.Short() {
		perWorker = 40
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for n := 0; n < perWorker; n++ {
				k := 1 + rng.IntN(most)
				items := make([]core.Item, 0, k)
				for _, b := range rng.Perm(len(budgets))[:k] {
					l := budgets[b].limits[rng.IntN(len(budgets[b].limits))]
					cost := int64(rng.IntN(3))
					if rng.IntN(10) == 0 {
						cost = l.Capacity()
					}
					items = append(items, item(budgets[b].name, keys[rng.IntN(len(keys))], l, cost, rng.IntN(6) == 0))
				}
				out := make([]core.Outcome, len(items))
				if err := st.Take(context.Background(), items, out); err != nil {
					failed.Store(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	rs := runs()
	slices.SortFunc(rs, func(a, b batchRecord) int {
		return int(a.outs[0][0].Stamp - b.outs[0][0].Stamp)
	})
	var decisions, batched, sharedKey, denied, allowed int
	for _, r := range rs {
		decisions += len(r.items)
		if len(r.items) > 1 {
			batched++
		}
		seen := map[string]bool{}
		for d, items := range r.items {
			for i, it := range items {
				k := it.Budget + "/" + it.Key
				if seen[k] {
					sharedKey++
				}
				seen[k] = true
				if !items[i].Shadow && !r.outs[d][i].Allowed {
					denied++
				}
				if r.outs[d][i].Charged {
					allowed++
				}
			}
		}
	}
	if decisions != workers*perWorker {
		t.Fatalf("%d decisions recorded, %d made", decisions, workers*perWorker)
	}
	t.Logf("%d decisions in %d runs (%d of several decisions, %d items on a key an earlier decision of the run used), %d denied items, %d charged",
		decisions, len(rs), batched, sharedKey, denied, allowed)
	if batched == 0 || sharedKey == 0 || denied == 0 || allowed == 0 {
		t.Fatal("the run did not exercise batches, shared keys, denials and charges")
	}
	replay(t, rs)
	assertTTLs(t, client, "bdiff:")
}

// slowHook delays every script run by d before sending it, as a busy
// machine does (the process and the server share two loaded cores): the
// server answers every run, each well within the store's Timeout, but a
// Take queued behind several runs waits longer than Timeout in all.
type slowHook struct{ d time.Duration }

func (h slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "fcall" || n == "evalsha" || n == "eval" {
			select {
			case <-time.After(h.d):
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// TestBatchBusyIsNotDown: 400 concurrent Takes of one unit against a
// budget of 50, on a store whose every run takes 100 ms (a third of the
// 300 ms Timeout) but which, with batches of at most 64 decisions, needs 7
// runs in a row to answer them all. A store that answers is not down:
// every Take gets the server's outcome, and exactly 50 are charged. (A
// deadline counted from joining the queue failed the Takes behind the
// third run, and the engine let them through unlimited.)
func TestBatchBusyIsNotDown(t *testing.T) {
	_, client := startServer(t)
	client.AddHook(slowHook{100 * time.Millisecond})
	st := mustStore(t, client, Config{Prefix: "busy:", Timeout: 300 * time.Millisecond})
	if err := st.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := fixed(50, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	const callers = 400
	var charged, denied, failed atomic.Int32
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]core.Outcome, 1)
			err := st.Take(context.Background(), []core.Item{item("send", "org", l, 1, false)}, out)
			switch {
			case err != nil:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			case out[0].Charged:
				charged.Add(1)
			default:
				denied.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d Takes failed on a store that answered every run (first: %v)", failed.Load(), callers, firstErr.Load())
	}
	if charged.Load() != 50 || denied.Load() != callers-50-failed.Load() {
		t.Errorf("charged %d, denied %d, failed %d; want 50 charged of %d", charged.Load(), denied.Load(), failed.Load(), callers)
	}
}

// runOneBatch sends decisions as one batched script run, as the batcher
// does for concurrent Takes, and returns their outcomes.
func runOneBatch(t testing.TB, st *Store, decisions [][]core.Item) [][]core.Outcome {
	t.Helper()
	batch := make([]*pending, len(decisions))
	for j, items := range decisions {
		p := getPending(len(items))
		p.keys, p.blob = st.appendItems(p.keys, p.blob, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
			return appendTakeItem(b, &items[i], name, k, lk)
		})
		batch[j] = p
	}
	bb := batchBufPool.Get().(*batchBuf)
	defer putBatchBuf(bb)
	if !st.runBatch(context.Background(), nil, batch, bb) {
		t.Fatal(batch[0].err)
	}
	outs := make([][]core.Outcome, len(batch))
	for j, p := range batch {
		outs[j] = slices.Clone(p.out)
		putPending(p)
	}
	return outs
}

// TestBatchOnOneKeyExpires: a batch whose decisions follow one another on
// one key writes the key's expiry and TTL once its first record is
// charged, whichever decision's write carries it: a fresh key ends with
// a TTL of at most its window, and every budget's count is the batch's.
func TestBatchOnOneKeyExpires(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "bkeep:"})
	l := fixed(100, time.Minute)
	for n, budgets := range []string{"aa", "aaaa", "ab", "aabb", "abab", "abba"} {
		key := "k" + strconv.Itoa(n)
		var decisions [][]core.Item
		for _, b := range budgets {
			decisions = append(decisions, []core.Item{{Budget: string(b), Key: key, Limit: l, Cost: 1}})
		}
		outs := runOneBatch(t, st, decisions)
		left := map[string]int64{}
		for j, b := range budgets {
			left[string(b)]++
			if o := outs[j][0]; !o.Allowed || o.Remaining != 100-left[string(b)] {
				t.Errorf("%s: decision %d: allowed %v, remaining %d, want 100 - %d", budgets, j, o.Allowed, o.Remaining, left[string(b)])
			}
		}
		keys := keysWith(t, client, "bkeep:")
		for _, k := range keys {
			if !strings.Contains(k, key) {
				continue
			}
			ttl, err := client.PTTL(context.Background(), k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 || ttl > time.Minute {
				t.Errorf("%s: key %q has TTL %v, want (0, 1m]", budgets, k, ttl)
			}
		}
		// A later decision sees every charge of the batch.
		out := make([]core.Outcome, 1)
		for b, used := range left {
			if err := st.Take(context.Background(), []core.Item{{Budget: b, Key: key, Limit: l, Cost: 0}}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Remaining != 100-used {
				t.Errorf("%s: budget %s: remaining %d after the batch, want %d", budgets, b, out[0].Remaining, 100-used)
			}
		}
	}
}

// On a Ring, every shard's batcher applies the store's one run limit:
// Takes on both shards make two batchers under one gate.
func TestRingShardsShareTheRunLimit(t *testing.T) {
	ring := newRing(t, 2)
	st := mustStore(t, ring, Config{Prefix: "gate:"})
	shards := map[*redis.Client]bool{}
	l := fixed(1000, time.Hour)
	for i := 0; len(shards) < 2; i++ {
		k := "k" + strconv.Itoa(i)
		c, err := ring.GetShardClientForKey(partitionTag(k))
		if err != nil {
			t.Fatal(err)
		}
		shards[c] = true
		var out [1]core.Outcome
		if err := st.Take(context.Background(), []core.Item{item("b", k, l, 1, false)}, out[:]); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	st.ringBatchers.Range(func(_, v any) bool {
		n++
		if b := v.(*batcher); b.gate != st.gate {
			t.Errorf("a shard's batcher has a run limit of its own")
		}
		return true
	})
	st.gate.mu.Lock()
	joined := st.gate.n
	st.gate.mu.Unlock()
	if n != 2 || joined != 2 {
		t.Fatalf("%d shard batchers, %d under the gate; want 2 and 2", n, joined)
	}
}
