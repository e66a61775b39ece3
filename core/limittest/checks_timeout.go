package limittest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adaptive"
)

// timeoutAfter is the timeout of the routes of TimeoutChain. The handlers
// there outlast it by construction (they return only when the middleware
// ended their context or answered the request), so it only needs to leave
// the layers inside the time to start.
const timeoutAfter = 250 * time.Millisecond

// TimeoutChain checks layers behind the router's own timeout middleware
// (Config.TimeoutStatus), which runs the rest of the chain on a goroutine
// of its own and answers the request when the time is up, while the
// layers and the handler inside go on. With one layer (the only one behind
// the timeout), two (one before it, one behind), and three (one before,
// a guard and a concurrency budget behind) or a shaping layer and a
// concurrency budget behind, and handlers that outlast the timeout:
//
//   - every slow request is answered by the timeout middleware;
//   - once the handlers returned, every concurrency slot and every guard
//     place is back: a later request is admitted with the full budget;
//   - requests that pass only the layer before the timeout, sent all the
//     while, are all allowed: no other request's state or denial ever
//     reaches them.
//
// The layers write no header fields: a timeout middleware that hands the
// chain the request's own response (Fiber's) reads or rewrites it when the
// time is up, which races with any field the chain wrote before.
func TimeoutChain(t *testing.T, cfg Config) {
	if cfg.TimeoutStatus == 0 {
		t.Skip("the adapter supplies no timeout middleware (Config.TimeoutStatus)")
	}
	const shapeEvery = time.Second // the shaping layer's interval
	eng := engine(t, cfg,
		core.Budget{Name: "outer", Algorithm: core.SlidingLog, Quota: 1000, Window: time.Hour, Key: byClient},
		core.Budget{Name: "inflight", Algorithm: core.Concurrency, Quota: 2, Window: time.Minute, Key: byClient},
		core.Budget{Name: "shape", Algorithm: core.LeakyBucket, Quota: 1, Window: shapeEvery, MaxWait: 10 * time.Second, Key: byClient},
	)
	lim, err := adaptive.New(adaptive.Config{Name: "timeout", Initial: 2, Min: 2, Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	none := core.Headers(core.HeadersNone)
	outer := layer(t, eng, core.Use("outer"), none)
	inflight := layer(t, eng, core.Use("inflight"), none)
	guard := layer(t, eng, core.GuardBy(lim), none)
	shape := layer(t, eng, core.Use("shape"), none)

	slow := newSlow()
	behind := func(path string, layers ...*core.Layer) Route {
		return Route{Method: http.MethodPost, Path: path, Layers: layers, HandleContext: slow.handle, Timeout: timeoutAfter}
	}
	held := newGate()
	app := App{Groups: []Group{
		{Routes: []Route{
			behind("/one", inflight),
		}},
		{Prefix: "/two", Layers: []*core.Layer{outer}, Routes: []Route{
			behind("/slow", inflight),
			route(http.MethodPost, "/fast", nil),
			{Method: http.MethodPost, Path: "/held", Layers: []*core.Layer{inflight}, Handle: held.handle},
		}},
		{Prefix: "/three", Layers: []*core.Layer{outer}, Routes: []Route{
			behind("/slow", guard, inflight),
			behind("/shaped", shape, inflight),
			route(http.MethodPost, "/fast", nil),
		}},
	}}
	c := newClient(t, cfg.Serve(t, app))

	// Requests that pass only the layer before the timeout, all the while.
	stop := make(chan struct{})
	var (
		fastWG   sync.WaitGroup
		fastN    atomic.Int64
		fastMu   sync.Mutex
		fastErrs []string
	)
	for _, path := range []string{"/two/fast", "/three/fast"} {
		fastWG.Add(1)
		go func() {
			defer fastWG.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := c.send(http.MethodPost, path, ClientHeader, newID())
				fastN.Add(1)
				if err == nil && r.Status == http.StatusOK && r.Body == "ok" {
					continue
				}
				fastMu.Lock()
				if err != nil {
					fastErrs = append(fastErrs, err.Error())
				} else {
					fastErrs = append(fastErrs, fmt.Sprintf("%s: %d %q", path, r.Status, r.Body))
				}
				fastMu.Unlock()
			}
		}()
	}
	defer func() {
		close(stop)
		fastWG.Wait()
		if fastN.Load() == 0 {
			t.Error("no request passed only the layer before the timeout")
		}
		for i, e := range fastErrs {
			if i == 5 {
				t.Errorf("... and %d more", len(fastErrs)-i)
				break
			}
			t.Errorf("a request that passed only the layer before the timeout was answered otherwise than by its handler: %s", e)
		}
	}()

	// Two requests on each slow route hold both slots of their client; on
	// the shaping route, the second and third wait 1s and 2s for their
	// turn, beyond the timeout.
	type slowReq struct{ path, id string }
	ids := map[string]string{"/one": newID(), "/two/slow": newID(), "/three/slow": newID(), "/three/shaped": newID()}
	var reqs []slowReq
	for path, id := range ids {
		n := 2
		if path == "/three/shaped" {
			n = 3
		}
		for range n {
			reqs = append(reqs, slowReq{path, id})
		}
	}
	var wg sync.WaitGroup
	results := make([]response, len(reqs))
	errs := make([]error, len(reqs))
	for i, rq := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.send(http.MethodPost, rq.path, ClientHeader, rq.id)
		}()
	}
	wg.Wait()
	for i, rq := range reqs {
		if errs[i] != nil {
			t.Errorf("%s: %v", rq.path, errs[i])
			continue
		}
		wantStatus(t, results[i], cfg.TimeoutStatus, rq.path+", a handler that outlasts the timeout")
	}

	// The middleware answered: let the handlers return, and wait for the
	// shaping waits to end.
	slow.open()
	slow.waitReturned(t)
	waitShaped(t, eng, ids["/three/shaped"], 3*shapeEvery+5*time.Second)
	for path, id := range ids {
		wantFree(t, eng, id, 2, path+", after its handlers returned")
	}
	deadline := time.Now().Add(5 * time.Second)
	for lim.Stats().InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := lim.Stats(); s.InFlight != 0 {
		t.Errorf("guard after the handlers returned: %d in flight, want 0", s.InFlight)
	}

	// A later request of a client whose requests timed out is admitted
	// with the full budget: two at once.
	id := ids["/two/slow"]
	var hw sync.WaitGroup
	hres := make([]response, 2)
	herrs := make([]error, 2)
	for i := range 2 {
		hw.Add(1)
		go func() {
			defer hw.Done()
			hres[i], herrs[i] = c.send(http.MethodPost, "/two/held", ClientHeader, id)
		}()
	}
	held.waitEntered(t, 2)
	held.open()
	hw.Wait()
	for i := range 2 {
		if herrs[i] != nil {
			t.Fatal(herrs[i])
		}
		wantStatus(t, hres[i], http.StatusOK, "a later request of a client whose requests timed out")
	}
}

// slow is the handler behind a timeout: it returns when its request's
// context ends or when the check opens it, and counts the handlers that
// entered and returned.
type slow struct {
	release  chan struct{}
	once     sync.Once
	entered  atomic.Int64
	returned atomic.Int64
}

func newSlow() *slow { return &slow{release: make(chan struct{})} }

func (s *slow) handle(ctx context.Context) string {
	s.entered.Add(1)
	defer s.returned.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return "slow"
}

func (s *slow) open() { s.once.Do(func() { close(s.release) }) }

// waitReturned waits until every handler that entered has returned.
func (s *slow) waitReturned(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for s.returned.Load() != s.entered.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slow handlers returned", s.returned.Load(), s.entered.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitShaped waits until key's shaping budget is empty again: every
// request admitted to wait has had its turn (or was refunded), so its
// wait has ended.
func waitShaped(t *testing.T, eng *core.Engine, key string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p, err := eng.Peek(context.Background(), key, "shape")
		if err != nil {
			t.Fatalf("peek: %v", err)
		}
		if p[0].Remaining == p[0].Limit.Quota {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shaping budget still has %d of %d after %v", p[0].Remaining, p[0].Limit.Quota, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TimeoutUnderLoad checks the layers behind the router's timeout
// middleware while requests time out all the while: for 2 s, four
// goroutines send requests to a route behind the timeout (5 ms, then a
// concurrency layer, then a handler that outlasts it) and eight send
// requests to a route beside it, behind the same group layer, with no
// timeout:
//
//   - every request beside the timeout is answered by its own handler;
//   - every request behind it is answered, and some with TimeoutStatus;
//   - once the handlers returned, every concurrency slot is back.
//
// A timeout middleware that hands the request's router context to
// another request while the chain behind it runs on fails the first: the
// chain, going on when its handler returns, runs through the other
// request's handlers (gin-contrib/timeout before v1.2.1 answered a few
// in 60,000 of them 200 with no body).
func TimeoutUnderLoad(t *testing.T, cfg Config) {
	if cfg.TimeoutStatus == 0 {
		t.Skip("the adapter supplies no timeout middleware (Config.TimeoutStatus)")
	}
	const (
		after = 5 * time.Millisecond
		quota = 1000
		load  = 2 * time.Second
	)
	eng := engine(t, cfg,
		core.Budget{Name: "outer", Algorithm: core.FixedWindow, Quota: 1 << 30, Window: time.Hour, Key: byClient},
		core.Budget{Name: "inflight", Algorithm: core.Concurrency, Quota: quota, Window: time.Minute, Key: byClient},
	)
	none := core.Headers(core.HeadersNone)
	outer := layer(t, eng, core.Use("outer"), none)
	inflight := layer(t, eng, core.Use("inflight"), none)
	outlast := func(ctx context.Context) string {
		select {
		case <-ctx.Done():
		case <-time.After(2 * after): // Fiber v2's timeout.New ends no context
		}
		time.Sleep(time.Millisecond)
		return "slow"
	}
	c := newClient(t, cfg.Serve(t, App{Groups: []Group{{Prefix: "/t", Layers: []*core.Layer{outer}, Routes: []Route{
		{Method: http.MethodPost, Path: "/slow", Layers: []*core.Layer{inflight}, HandleContext: outlast, Timeout: after},
		route(http.MethodPost, "/fast", nil),
	}}}}))

	id := newID()
	var (
		wg         sync.WaitGroup
		fast, slow atomic.Int64
		timedOut   atomic.Int64
		mu         sync.Mutex
		wrong      []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		wrong = append(wrong, s)
	}
	stop := time.Now().Add(load)
	send := func(path string, n *atomic.Int64, check func(response)) {
		defer wg.Done()
		for time.Now().Before(stop) {
			r, err := c.send(http.MethodPost, path, ClientHeader, id)
			n.Add(1)
			if err != nil {
				note(err.Error())
				continue
			}
			check(r)
		}
	}
	for range 8 {
		wg.Add(1)
		go send("/t/fast", &fast, func(r response) {
			if r.Status != http.StatusOK || r.Body != "ok" {
				note(fmt.Sprintf("/t/fast: %d %q", r.Status, r.Body))
			}
		})
	}
	for range 4 {
		wg.Add(1)
		go send("/t/slow", &slow, func(r response) {
			if r.Status == cfg.TimeoutStatus {
				timedOut.Add(1)
			}
		})
	}
	wg.Wait()
	if timedOut.Load() == 0 {
		t.Errorf("none of %d requests behind the timeout was answered %d", slow.Load(), cfg.TimeoutStatus)
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d requests beside the timeout and %d behind it were answered otherwise than by their handler or the timeout, e.g. %q",
			len(wrong), fast.Load(), slow.Load(), wrong[:min(len(wrong), 5)])
	}
	wantFree(t, eng, id, quota, "after the requests behind the timeout")
}
