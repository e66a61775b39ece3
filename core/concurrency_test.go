package core_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

func inflight(quota int64) core.Budget {
	return core.Budget{Name: "inflight", Algorithm: core.Concurrency, Quota: quota, Window: time.Minute, Key: remoteAddrKey}
}

// free returns the free slots of budget name for key.
func free(t *testing.T, e *core.Engine, key, name string) int64 {
	t.Helper()
	p, err := e.Peek(context.Background(), key, name)
	if err != nil {
		t.Fatal(err)
	}
	return p[0].Remaining
}

func TestConcurrencyAlgorithm(t *testing.T) {
	s := newStore(t, nil)
	l := core.Limit{Algorithm: core.Concurrency, Quota: 3, Window: time.Minute}
	ctx := context.Background()
	items := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 2}}
	a := make([]core.Outcome, 1)
	if err := s.Take(ctx, items, a); err != nil || !a[0].Charged || a[0].Remaining != 1 || a[0].Reset != 0 {
		t.Fatalf("first take: %+v %v", a[0], err)
	}
	o := take(t, s, l, "k", 2)
	if o.Allowed || o.Remaining != 1 || o.RetryAfter != core.ConcurrencyRetryAfter {
		t.Fatalf("take beyond the slots: %+v", o)
	}
	if o := take(t, s, l, "k", 1); !o.Charged || o.Remaining != 0 {
		t.Fatalf("last slot: %+v", o)
	}
	if err := s.Refund(ctx, items, a); err != nil {
		t.Fatal(err)
	}
	if o := take(t, s, l, "k", 0); o.Remaining != 2 {
		t.Fatalf("after giving back 2 slots: %+v", o)
	}
	// A changed lease (window) keeps the slots held.
	l.Window = time.Hour
	if o := take(t, s, l, "k", 0); o.Remaining != 2 {
		t.Fatalf("after a changed lease: %+v", o)
	}
}

// TestConcurrencyMemoryExact hammers one key with many goroutines taking
// and giving back slots, directly on the store and through an engine: the
// slots held never exceed the quota, every slot is counted, and all are
// free at the end. Run with -race.
func TestConcurrencyMemoryExact(t *testing.T) {
	const quota, workers, rounds = 5, 32, 200
	t.Run("store", func(t *testing.T) {
		s := newStore(t, nil)
		l := core.Limit{Algorithm: core.Concurrency, Quota: quota, Window: time.Minute}
		var held, peak, admitted atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				items := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 1 + int64(w%2)}}
				out := make([]core.Outcome, 1)
				for range rounds {
					if err := s.Take(context.Background(), items, out); err != nil {
						t.Error(err)
						return
					}
					if !out[0].Charged {
						continue
					}
					admitted.Add(1)
					n := held.Add(items[0].Cost)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(20 * time.Microsecond) // hold the slot while others try
					held.Add(-items[0].Cost)
					if err := s.Refund(context.Background(), items, out); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if p := peak.Load(); p > quota {
			t.Errorf("%d slot units held at once, quota %d", p, quota)
		}
		if admitted.Load() == 0 {
			t.Fatal("nothing admitted")
		}
		if o := take(t, s, l, "k", 0); o.Remaining != quota {
			t.Errorf("%d free slots at the end, want %d", o.Remaining, quota)
		}
	})
	t.Run("engine", func(t *testing.T) {
		e, _ := newEngine(t, nil, inflight(quota))
		l := e.MustLayer(core.Use("inflight"))
		var held, peak, admitted, denied atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := request("GET", "10.0.0.1")
				var d core.Decision
				for range rounds {
					d.Reset()
					l.Decide(r, &d)
					if !d.Allowed {
						denied.Add(1)
						if d.Done(context.Background(), 0); len(d.Results) != 1 || d.Results[0].Charged {
							t.Errorf("denied decision holds a slot: %+v", d.Results)
						}
						continue
					}
					admitted.Add(1)
					n := held.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(20 * time.Microsecond)
					held.Add(-1)
					d.Done(context.Background(), 0)
					d.Done(context.Background(), 0) // a second release gives nothing back
				}
			}()
		}
		wg.Wait()
		if p := peak.Load(); p > quota {
			t.Errorf("%d requests in flight at once, quota %d", p, quota)
		}
		if admitted.Load() == 0 || denied.Load() == 0 {
			t.Errorf("admitted %d, denied %d: the test did not contend", admitted.Load(), denied.Load())
		}
		if n := free(t, e, "10.0.0.1", "inflight"); n != quota {
			t.Errorf("%d free slots at the end, want %d", n, quota)
		}
	})
}

// TestConcurrencyEntryNotEvicted fills a one-shard store past its cap with
// new keys, of the concurrency budget itself and of another budget: the
// entries holding slots are never evicted, and their slots are given back
// exactly.
func TestConcurrencyEntryNotEvicted(t *testing.T) {
	c := newFakeClock(t0)
	s, err := memstore.New(memstore.Config{Clock: c, MaxEntries: 8, Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conc := core.Limit{Algorithm: core.Concurrency, Quota: 2, Window: time.Minute}
	fixed := core.Limit{Algorithm: core.FixedWindow, Quota: 100, Window: time.Hour}
	var held []core.Item
	var outs []core.Outcome
	for i := range 4 {
		it := []core.Item{{Budget: "c", Key: "held" + strconv.Itoa(i), Limit: conc, Cost: 2}}
		out := make([]core.Outcome, 1)
		if err := s.Take(ctx, it, out); err != nil || !out[0].Charged {
			t.Fatalf("take: %+v %v", out[0], err)
		}
		held, outs = append(held, it[0]), append(outs, out[0])
	}
	for i := range 200 {
		// New keys: of the fixed window budget, and of the concurrency
		// budget given back at once (so their entries may go).
		it := []core.Item{{Budget: "f", Key: "flood" + strconv.Itoa(i), Limit: fixed, Cost: 1}}
		if i%2 == 1 {
			it[0].Budget, it[0].Limit = "c", conc
		}
		out := make([]core.Outcome, 1)
		if err := s.Take(ctx, it, out); err != nil || !out[0].Charged {
			t.Fatalf("flood take: %+v %v", out[0], err)
		}
		if it[0].Budget == "c" {
			if err := s.Refund(ctx, it, out); err != nil {
				t.Fatal(err)
			}
		}
		c.Advance(time.Millisecond)
	}
	if s.Evictions() == 0 {
		t.Fatal("the flood evicted nothing; the test did not fill the store")
	}
	if s.Len() > 8+len(held) {
		t.Errorf("%d entries: more than the cap and the entries holding slots", s.Len())
	}
	for i, it := range held {
		peek := []core.Item{it}
		peek[0].Cost = 0
		o := make([]core.Outcome, 1)
		if err := s.Take(ctx, peek, o); err != nil || o[0].Remaining != 0 {
			t.Fatalf("held key %d after the flood: %+v %v (its slots were lost)", i, o[0], err)
		}
		if err := s.Refund(ctx, held[i:i+1], outs[i:i+1]); err != nil {
			t.Fatal(err)
		}
		if err := s.Take(ctx, peek, o); err != nil || o[0].Remaining != 2 {
			t.Fatalf("held key %d given back: %+v %v", i, o[0], err)
		}
	}
}

// exchange is a minimal core.Exchange: next is the rest of the chain.
type exchange struct {
	next   func() int
	denied int
}

func (x *exchange) FieldBuffer() []byte   { return nil }
func (x *exchange) SetHeader(_, _ string) {}
func (x *exchange) DelHeader(string)      {}
func (x *exchange) Deny(_ *core.Decision, den core.Denial) error {
	x.denied = den.Status
	return nil
}
func (x *exchange) Next(bool) (int, error) { return x.next(), nil }

// serve runs the layers' sequence (outermost first) for one request from
// addr, with handler as the innermost handler, and returns the status of
// a denial (0 when the handler ran) and the request's state.
func serve(ctx context.Context, addr string, handler func() int, layers ...*core.Layer) (int, *core.RequestState) {
	st := &core.RequestState{}
	st.Request = core.Request{Context: ctx, Method: "POST", Path: "/", RemoteAddr: addr}
	denied := 0
	var run func(i int) int
	run = func(i int) int {
		if i == len(layers) {
			return handler()
		}
		x := &exchange{next: func() int { return run(i + 1) }}
		_ = layers[i].Serve(st, x)
		if x.denied != 0 {
			denied = x.denied
		}
		return http.StatusOK
	}
	run(0)
	return denied, st
}

// freeIn returns the free slots of a concurrency budget of quota slots in
// store s.
func freeIn(t *testing.T, s core.Store, budget, key string, quota int64) int64 {
	t.Helper()
	out := make([]core.Outcome, 1)
	l := core.Limit{Algorithm: core.Concurrency, Quota: quota, Window: time.Minute}
	if err := s.Take(context.Background(), []core.Item{{Budget: budget, Key: key, Limit: l}}, out); err != nil {
		t.Fatal(err)
	}
	return out[0].Remaining
}

// TestConcurrencySlotGivenBackOnce runs a request through the adapters'
// sequence on every path a slot can take, with one more slot of the same
// key held apart by a direct Decide: the handler sees its own slot held,
// and afterwards exactly the slot held apart is, so a slot given back
// twice (which would free the other) or never shows.
func TestConcurrencySlotGivenBackOnce(t *testing.T) {
	const quota = 3
	const addr = "192.0.2.1"
	once := core.Budget{Name: "once", Quota: 1, Window: time.Hour, Key: remoteAddrKey}
	shape := core.Budget{Name: "shape", Algorithm: core.LeakyBucket, Quota: 1, Window: time.Hour, MaxWait: 2 * time.Hour, Key: remoteAddrKey}
	shadow := inflight(quota)
	shadow.Shadow = true
	L := func(o ...core.LayerOption) []core.LayerOption { return o }
	cases := []struct {
		name    string
		cfg     core.Config
		layers  [][]core.LayerOption
		down    bool // the main store fails the request's take
		prepare func(layers []*core.Layer)
		timeout bool // the request's context ends after 50 ms
		panics  bool
		denied  int  // the status of the expected denial, 0 when the handler runs
		local   bool // the slot is in the fallback store
	}{
		{name: "allowed", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}}, layers: [][]core.LayerOption{L(core.Use("inflight"))}},
		{name: "panic", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}}, layers: [][]core.LayerOption{L(core.Use("inflight"))}, panics: true},
		{name: "this layer denies", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}},
			layers: [][]core.LayerOption{L(core.Use("inflight"), core.CostIn("inflight", quota))}, denied: http.StatusTooManyRequests},
		{name: "later layer denies", cfg: core.Config{Budgets: []core.Budget{inflight(quota), once}},
			layers:  [][]core.LayerOption{L(core.Use("inflight")), L(core.Use("once"))},
			prepare: func(ls []*core.Layer) { _ = decide(ls[1], request("POST", addr)) }, denied: http.StatusTooManyRequests},
		{name: "count when refunds", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}},
			layers: [][]core.LayerOption{L(core.Use("inflight"), core.CountWhen(func(status int) bool { return status == 401 }))}},
		{name: "count when keeps", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}},
			layers: [][]core.LayerOption{L(core.Use("inflight"), core.CountWhen(func(status int) bool { return status == 200 }))}},
		{name: "shaping wait cut short", cfg: core.Config{Budgets: []core.Budget{inflight(quota), shape}},
			layers:  [][]core.LayerOption{L(core.Use("inflight")), L(core.Use("shape"))},
			prepare: func(ls []*core.Layer) { _ = decide(ls[1], request("POST", addr)) }, timeout: true, denied: http.StatusServiceUnavailable},
		{name: "shadow", cfg: core.Config{Budgets: []core.Budget{shadow}}, layers: [][]core.LayerOption{L(core.Use("inflight"))}},
		{name: "dry run", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}, DryRun: true}, layers: [][]core.LayerOption{L(core.Use("inflight"))}},
		{name: "fail open", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}, BreakerThreshold: -1},
			layers: [][]core.LayerOption{L(core.Use("inflight"))}, down: true},
		{name: "fail local", cfg: core.Config{Budgets: []core.Budget{inflight(quota)}, FailureMode: core.FailLocal, BreakerThreshold: -1},
			layers: [][]core.LayerOption{L(core.Use("inflight"))}, down: true, local: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := &flakyStore{Store: newStore(t, nil)}
			tc.cfg.Store = fs
			var local *memstore.Store
			if tc.local {
				local = newStore(t, nil)
				tc.cfg.Fallback = local
			}
			e := core.MustNew(tc.cfg)
			var layers []*core.Layer
			for _, o := range tc.layers {
				layers = append(layers, e.MustLayer(o...))
			}
			if apart := decide(e.MustLayer(core.Use("inflight")), request("POST", addr)); !apart.Results[0].Charged {
				t.Fatalf("slot held apart: %+v", apart)
			}
			if tc.prepare != nil {
				tc.prepare(layers)
			}
			fs.down.Store(tc.down)
			ran := false
			handler := func() int {
				ran = true
				fs.down.Store(false)
				defer fs.down.Store(tc.down)
				want := int64(quota - 2) // its own slot and the one held apart
				switch {
				case tc.down && !tc.local:
					want = quota - 1 // failed open: no slot
				case tc.local:
					want = quota - 1
					if n := freeIn(t, local, "inflight", addr, quota); n != quota-1 {
						t.Errorf("fallback store: %d free slots in the handler, want %d", n, quota-1)
					}
				}
				if n := free(t, e, addr, "inflight"); n != want {
					t.Errorf("%d free slots in the handler, want %d", n, want)
				}
				if tc.panics {
					panic("handler panic")
				}
				return http.StatusOK
			}
			ctx := context.Background()
			if tc.timeout {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			}
			denied := 0
			func() {
				defer func() {
					if p := recover(); p != nil && !tc.panics {
						panic(p)
					}
				}()
				denied, _ = serve(ctx, addr, handler, layers...)
			}()
			fs.down.Store(false)
			if denied != tc.denied {
				t.Errorf("denied with %d, want %d", denied, tc.denied)
			}
			if ran != (tc.denied == 0) {
				t.Errorf("handler ran: %v", ran)
			}
			if n := free(t, e, addr, "inflight"); n != quota-1 {
				t.Errorf("%d free slots after the request, want %d (the one held apart)", n, quota-1)
			}
			if local != nil {
				if n := freeIn(t, local, "inflight", addr, quota); n != quota {
					t.Errorf("fallback store: %d free slots after the request, want %d", n, quota)
				}
			}
		})
	}
}

// TestDecisionRelease: a direct caller of Layer.Decide gives its slots back
// with Decision.Done, once, keeping its other charges.
func TestDecisionRelease(t *testing.T) {
	e, _ := newEngine(t, nil, inflight(2), core.Budget{Name: "rate", Quota: 10, Window: time.Hour, Key: remoteAddrKey})
	l := e.MustLayer(core.Use("inflight", "rate"))
	r := request("GET", "10.0.0.9")
	a, b := decide(l, r), decide(l, r)
	if !a.Allowed || !b.Allowed || free(t, e, "10.0.0.9", "inflight") != 0 {
		t.Fatalf("two decisions: %+v %+v", a, b)
	}
	if c := decide(l, r); c.Allowed || c.DeniedBy != "inflight" || c.RetryAfter != core.ConcurrencyRetryAfter {
		t.Fatalf("third decision: %+v", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a release is not cut short by its context
	a.Done(ctx, 0)
	a.Done(ctx, 0)
	if n := free(t, e, "10.0.0.9", "inflight"); n != 1 {
		t.Fatalf("%d free slots after releasing one decision twice, want 1", n)
	}
	if n := free(t, e, "10.0.0.9", "rate"); n != 10-3+1 {
		// three decisions charged "rate" but the denied one was not
		t.Fatalf("rate budget: %d remaining, want 8 (a release keeps other charges)", n)
	}
	b.Done(ctx, 0)
	if n := free(t, e, "10.0.0.9", "inflight"); n != 2 {
		t.Fatalf("%d free slots after releasing both, want 2", n)
	}
}

// TestConcurrencyHeaders: a concurrency budget is the draft's concurrency
// limit: q and qu="concurrent-requests" with no w in RateLimit-Policy, and
// the free slots with no t in RateLimit; fields that parse as RFC 9651
// lists beside a window budget's.
func TestConcurrencyHeaders(t *testing.T) {
	c := newFakeClock(t0.Add(17 * time.Second))
	e, err := core.New(core.Config{Store: newStore(t, c), Clock: c, Budgets: []core.Budget{
		{Name: "rate", Quota: 100, Window: time.Minute, Key: remoteAddrKey},
		{Name: "exports", Algorithm: core.Concurrency, Quota: 2, Window: 10 * time.Minute, Key: remoteAddrKey},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l := e.MustLayer(core.Use("rate", "exports"))
	d1 := decide(l, request("POST", "k"))
	f := l.Fields(d1)
	if got, want := f.Get(core.HeaderPolicy), `"rate";q=100;w=60, "exports";q=2;qu="concurrent-requests"`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := f.Get(core.HeaderRateLimit), `"rate";r=99;t=43, "exports";r=1`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	for _, v := range []string{f.Get(core.HeaderPolicy), f.Get(core.HeaderRateLimit)} {
		list, err := httpsfv.UnmarshalList([]string{v})
		if err != nil || len(list) != 2 {
			t.Fatalf("%q does not parse as a list of two: %v", v, err)
		}
	}
	_ = decide(l, request("POST", "k"))
	d3 := decide(l, request("POST", "k"))
	if d3.Allowed || d3.DeniedBy != "exports" {
		t.Fatalf("third request: %+v", d3)
	}
	f = l.Fields(d3)
	if got, want := f.Get(core.HeaderRateLimit), `"rate";r=98;t=43, "exports";r=0`; got != want {
		t.Errorf("denied: RateLimit %q, want %q", got, want)
	}
	den := l.Deny(request("POST", "k"), d3)
	if den.Status != http.StatusTooManyRequests || den.Header.Get(core.HeaderRetryAfter) != "1" ||
		!strings.Contains(string(den.Body), `has no free slot`) {
		t.Errorf("denial: %d %v %s", den.Status, den.Header, den.Body)
	}
	// The legacy styles report the tightest budget; a concurrency budget's
	// reset is 1 with no slot free.
	ld := e.MustLayer(core.Use("rate", "exports"), core.Headers(core.HeadersDraft))
	f = ld.Fields(d3)
	if f.Get(core.HeaderLimit) != "2" || f.Get(core.HeaderRemaining) != "0" || f.Get(core.HeaderReset) != "1" {
		t.Errorf("draft fields: %s %s %s", f.Get(core.HeaderLimit), f.Get(core.HeaderRemaining), f.Get(core.HeaderReset))
	}
}

// FuzzConcurrencyHeaders renders a concurrency budget's fields beside a
// window budget's for arbitrary names, slots and costs, and parses them
// back with an independent RFC 9651 parser: the concurrency member has q
// and qu="concurrent-requests" and no w, and r the free slots with no t.
func FuzzConcurrencyHeaders(f *testing.F) {
	f.Add("exports", int64(4), int64(1), uint8(2))
	f.Add(`q"uo\te`, int64(1), int64(1), uint8(3))
	f.Add("a,b;c=d", int64(100_000), int64(7), uint8(0))
	f.Fuzz(func(t *testing.T, name string, quota, cost int64, takes uint8) {
		e, err := core.New(core.Config{Store: newStore(t, nil), Budgets: []core.Budget{
			{Name: name, Algorithm: core.Concurrency, Quota: quota, Window: time.Minute, Key: remoteAddrKey},
			{Name: name + "_rate", Quota: 10, Window: time.Minute, Key: remoteAddrKey},
		}})
		if err != nil {
			return // invalid configurations are rejected, not rendered
		}
		l, err := e.Layer(core.Use(name, name+"_rate"), core.CostIn(name, cost))
		if err != nil {
			return
		}
		var d *core.Decision
		for range takes%8 + 1 {
			d = decide(l, request("GET", "k"))
		}
		res := result(t, d, name)
		fields := l.Fields(d)
		for _, field := range []string{core.HeaderPolicy, core.HeaderRateLimit} {
			v := fields.Get(field)
			list, err := httpsfv.UnmarshalList([]string{v})
			if err != nil || len(list) != 2 {
				t.Fatalf("%s: %q does not parse as two members: %v", field, v, err)
			}
			item := list[0].(httpsfv.Item)
			if item.Value != name {
				t.Fatalf("%s: member names %q, want %q", field, item.Value, name)
			}
			p := item.Params
			if field == core.HeaderPolicy {
				q, _ := p.Get("q")
				qu, _ := p.Get("qu")
				_, hasW := p.Get("w")
				if q != quota || qu != "concurrent-requests" || hasW {
					t.Fatalf("policy member %q", v)
				}
				continue
			}
			r, _ := p.Get("r")
			_, hasT := p.Get("t")
			if r != res.Remaining || hasT {
				t.Fatalf("RateLimit member %q, remaining %d", v, res.Remaining)
			}
		}
	})
}

// panicky is a Guard that admits every request and whose Release panics
// the first time; it counts the places given back.
type panicky struct {
	name     string
	panicked atomic.Bool
	released atomic.Int32
}

func (g *panicky) Admit(_ *core.Request, s *core.GuardState) (bool, bool) {
	s.Name = g.name
	return true, false
}

func (g *panicky) Release(bool, time.Duration, int) {
	g.released.Add(1)
	if g.panicked.CompareAndSwap(false, true) {
		panic("release of " + g.name)
	}
}

// panickyObserver counts the decisions it is told about, and panics on
// the first unless calm.
type panickyObserver struct {
	calm      bool
	decisions atomic.Int32
}

func (o *panickyObserver) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {
	if o.decisions.Add(1) == 1 && !o.calm {
		panic("observer")
	}
}

func (o *panickyObserver) ObserveError(core.ErrorKind, string, error) {}

// TestUserPanicLosesNoSlot: a panic in code of the user's that runs as a
// request leaves a layer (a guard's Release, as an adaptive limiter's
// Signal causes; CountWhen; the observer) goes on up, and the request's
// concurrency slots and the other guards' places are still given back.
func TestUserPanicLosesNoSlot(t *testing.T) {
	const addr = "192.0.2.7"
	recovered := func(t *testing.T, want string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r != want {
				t.Errorf("recovered %v, want %q", r, want)
			}
		}()
		f()
	}
	ok := func() int { return http.StatusOK }
	for _, panicIn := range []string{"guard", "count when", "observer"} {
		t.Run("adapter sequence, "+panicIn, func(t *testing.T) {
			g := &panicky{name: "g"}
			obs := &panickyObserver{calm: panicIn != "observer"}
			cfg := core.Config{Store: newStore(t, nil), Budgets: []core.Budget{inflight(1)}, Observer: obs}
			opts := []core.LayerOption{core.Use("inflight")}
			want := "release of g"
			switch panicIn {
			case "guard":
				opts = append(opts, core.GuardBy(g))
			case "count when":
				var once atomic.Bool
				opts = append(opts, core.CountWhen(func(int) bool {
					if once.CompareAndSwap(false, true) {
						panic("count when")
					}
					return true
				}))
				want = "count when"
			case "observer":
				want = "observer"
			}
			e := core.MustNew(cfg)
			l := e.MustLayer(opts...)
			recovered(t, want, func() { serve(context.Background(), addr, ok, l) })
			if n := free(t, e, addr, "inflight"); n != 1 {
				t.Errorf("%d free slots after the %s panicked, want 1", n, panicIn)
			}
			if n := obs.decisions.Load(); n != 1 {
				t.Errorf("the observer was told of %d decisions, want the request's 1", n)
			}
			if denied, _ := serve(context.Background(), addr, ok, l); denied != 0 {
				t.Errorf("the next request was denied %d", denied)
			}
		})
	}
	t.Run("Decision.Done", func(t *testing.T) {
		e, _ := newEngine(t, nil, inflight(1))
		outer, inner := &panicky{name: "outer"}, &panicky{name: "inner"}
		inner.panicked.Store(true) // only the outer one panics
		lo := e.MustLayer(core.GuardBy(outer), core.Use("inflight"))
		li := e.MustLayer(core.GuardBy(inner))
		r := request("GET", addr)
		var d core.Decision
		lo.Decide(r, &d)
		li.Decide(r, &d)
		if !d.Allowed {
			t.Fatalf("decision: %+v", d)
		}
		recovered(t, "release of outer", func() { d.Done(context.Background(), 0) })
		if outer.released.Load() != 1 || inner.released.Load() != 1 || free(t, e, addr, "inflight") != 1 {
			t.Errorf("after Done: places given back %d (outer) and %d (inner), %d free slots; want 1, 1, 1",
				outer.released.Load(), inner.released.Load(), free(t, e, addr, "inflight"))
		}
		d.Done(context.Background(), 0)
		if outer.released.Load() != 1 || inner.released.Load() != 1 {
			t.Errorf("a second Done gave places back again: %d and %d", outer.released.Load(), inner.released.Load())
		}
	})
}

// TestKeyPanicGivesTheGuardsPlaceBack: a key function that panics in a
// guarded layer, after the guard admitted the request, passes the panic on
// and the guard's place is given back, through the adapters' sequence and
// through a direct Decide alike.
func TestKeyPanicGivesTheGuardsPlaceBack(t *testing.T) {
	const addr = "192.0.2.8"
	var panics atomic.Int32
	key := func(r *core.Request) (string, error) {
		if panics.Add(-1) >= 0 {
			panic("key")
		}
		return r.RemoteAddr, nil
	}
	budget := core.Budget{Name: "rate", Quota: 100, Window: time.Hour, Key: key}
	for _, path := range []string{"adapter sequence", "Decide"} {
		t.Run(path, func(t *testing.T) {
			e, _ := newEngine(t, nil, budget)
			g := &panicky{name: "g"}
			g.panicked.Store(true) // its Release does not panic
			l := e.MustLayer(core.GuardBy(g), core.Use("rate"))
			run := func() {
				if path == "Decide" {
					var d core.Decision
					l.Decide(request("GET", addr), &d)
					d.Done(context.Background(), 0)
					return
				}
				serve(context.Background(), addr, func() int { return http.StatusOK }, l)
			}
			panics.Store(1)
			func() {
				defer func() {
					if r := recover(); r != "key" {
						t.Errorf("recovered %v, want the key function's panic", r)
					}
				}()
				run()
			}()
			if n := g.released.Load(); n != 1 {
				t.Errorf("after the panic: %d places given back, want the request's 1", n)
			}
			run()
			if n := g.released.Load(); n != 2 {
				t.Errorf("after the next request: %d places given back, want 2", n)
			}
		})
	}
}
