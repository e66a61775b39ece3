package limittest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// InFlight checks a concurrency budget (core.Concurrency) of 2 slots per
// client: a slot is held while the handler runs and a third request is
// denied with 429, Retry-After 1 and the draft's concurrency fields; each
// slot is given back when the handler returns, when it panics (the
// router's recovery answers 500), when a later layer denies the request,
// and when the client went away while the handler ran (the slot is held
// until the handler returns).
func InFlight(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "inflight", Algorithm: core.Concurrency, Quota: 2, Window: time.Minute, Key: byClient},
		core.Budget{Name: "once", Algorithm: core.FixedWindow, Quota: 1, Window: time.Hour, Key: byClient},
	)
	li := layer(t, eng, core.Use("inflight"))
	once := layer(t, eng, core.Use("once"))
	gate := newGate()
	var panics, inner counter
	app := App{Groups: []Group{
		{Routes: []Route{
			{Method: http.MethodPost, Path: "/held", Layers: []*core.Layer{li}, Handle: gate.handle},
			{Method: http.MethodPost, Path: "/boom", Layers: []*core.Layer{li}, Handle: func() string {
				panics.n.Add(1)
				panic("limittest: handler panic")
			}},
		}},
		{Prefix: "/g", Layers: []*core.Layer{li}, Routes: []Route{
			route(http.MethodPost, "/once", &inner, once),
		}},
	}}
	base := cfg.Serve(t, app)
	c := newClient(t, base)
	id := newID()
	free := func(what string, want int64) {
		t.Helper()
		wantFree(t, eng, id, want, what)
	}

	// Two requests hold both slots while their handlers run.
	var wg sync.WaitGroup
	results := make([]response, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.send(http.MethodPost, "/held", ClientHeader, id)
		}()
	}
	gate.waitEntered(t, 2)
	free("two handlers running", 0)
	r := c.do(http.MethodPost, "/held", ClientHeader, id)
	if wantStatus(t, r, http.StatusTooManyRequests, "third request") {
		wantHeader(t, r, core.HeaderRetryAfter, "1", "third request")
		wantHeader(t, r, core.HeaderPolicy, `"inflight";q=2;qu="concurrent-requests"`, "third request")
		wantHeader(t, r, core.HeaderRateLimit, `"inflight";r=0`, "third request")
		wantProblem(t, r, http.StatusTooManyRequests, core.ProblemQuotaExceeded, "inflight", 1, "third request")
	}
	free("after a denial", 0) // a denied request holds nothing
	gate.open()
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		wantStatus(t, results[i], http.StatusOK, "held request")
		wantHeader(t, results[i], core.HeaderPolicy, `"inflight";q=2;qu="concurrent-requests"`, "held request")
	}
	free("after both handlers returned", 2)

	// A panicking handler gives its slot back as the panic passes.
	for i := range 3 {
		wantStatus(t, c.do(http.MethodPost, "/boom", ClientHeader, id), http.StatusInternalServerError, fmt.Sprintf("panic %d", i))
	}
	free("after panics", 2)

	// The group's slot is given back when the route's layer denies.
	wantStatus(t, c.do(http.MethodPost, "/g/once", ClientHeader, id), http.StatusOK, "first /g/once")
	for i := range 3 {
		r := c.do(http.MethodPost, "/g/once", ClientHeader, id)
		wantStatus(t, r, http.StatusTooManyRequests, fmt.Sprintf("denied /g/once %d", i))
	}
	free("after an inner layer's denials", 2)
	if n := inner.n.Load(); n != 1 {
		t.Errorf("/g/once handler ran %d times, want 1", n)
	}

	// A client that goes away: the slot stays held while the handler runs,
	// and is given back when it returns.
	gate = gate.reset()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/held", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(ClientHeader, id)
	done := make(chan error, 1)
	go func() {
		res, err := c.hc.Do(req)
		if err == nil {
			res.Body.Close()
			err = fmt.Errorf("the abandoned request was answered with %d", res.StatusCode)
		}
		done <- err
	}()
	gate.waitEntered(t, 1)
	cancel()
	<-done
	free("handler of a gone client running", 1)
	gate.open()
	free("after the gone client's handler returned", 2)
	if n := panics.n.Load(); n != 3 {
		t.Errorf("panicking handler ran %d times, want 3", n)
	}
}

// gate holds handlers until it is opened, counting those that entered.
type gate struct {
	mu      sync.Mutex
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 64), release: make(chan struct{})}
}

// reset closes g again, for the handlers that enter it from now on.
func (g *gate) reset() *gate {
	g.mu.Lock()
	g.entered, g.release = make(chan struct{}, 64), make(chan struct{})
	g.mu.Unlock()
	return g
}

func (g *gate) handle() string {
	g.mu.Lock()
	entered, release := g.entered, g.release
	g.mu.Unlock()
	entered <- struct{}{}
	<-release
	return "ok"
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

// waitEntered waits until n handlers entered the gate.
func (g *gate) waitEntered(t *testing.T, n int) {
	t.Helper()
	g.mu.Lock()
	entered := g.entered
	g.mu.Unlock()
	timeout := time.After(15 * time.Second)
	for range n {
		select {
		case <-entered:
		case <-timeout:
			g.open()
			t.Fatalf("handlers did not start")
		}
	}
}

// wantFree reports unless key's free slots in budget "inflight" become
// want. A slot is given back as the handler returns, which may be just
// after the client read the response: poll for a few seconds.
func wantFree(t *testing.T, eng *core.Engine, key string, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := eng.Peek(context.Background(), key, "inflight")
		if err != nil {
			t.Fatalf("%s: peek: %v", what, err)
		}
		got := p[0].Remaining
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %d free slots, want %d", what, got, want)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
