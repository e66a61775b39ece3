package fastreq

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/valyala/fasthttp"
)

// fake is a router context: one request's fasthttp context, and what the
// rest of its chain does.
type fake struct {
	fc   *fasthttp.RequestCtx
	next func(*fake) error
	ctx  context.Context
	// released marks a context the router has released while a layer
	// still holds it: its user context can no longer be read (Fiber v2's
	// UserContext dereferences the nil fasthttp context of a released
	// Ctx).
	released bool
}

var fakeRouter = Router[*fake]{
	RequestCtx: func(c *fake) *fasthttp.RequestCtx { return c.fc },
	Next: func(c *fake) error {
		if c.next == nil {
			return nil
		}
		return c.next(c)
	},
	Route: func(*fake) string { return "/" },
	Context: func(c *fake) context.Context {
		if c.released {
			panic("the user context of a released request was read")
		}
		if c.ctx == nil {
			return context.Background()
		}
		return c.ctx
	},
	ErrStatus: func(error) int { return http.StatusInternalServerError },
}

func newFC() *fasthttp.RequestCtx {
	fc := new(fasthttp.RequestCtx)
	fc.Request.SetRequestURI("/x")
	return fc
}

// engine returns an engine whose budget "outer" has room and whose budget
// "inflight" holds two requests at once, both keyed by one constant.
func engine(t *testing.T) *core.Engine {
	t.Helper()
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	one := func(*core.Request) (string, error) { return "k", nil }
	return core.MustNew(core.Config{Store: ms, Budgets: []core.Budget{
		{Name: "outer", Algorithm: core.SlidingLog, Quota: 100, Window: time.Hour, Key: one},
		{Name: "inflight", Algorithm: core.Concurrency, Quota: 2, Window: time.Minute, Key: one},
	}})
}

func free(t *testing.T, eng *core.Engine) int64 {
	t.Helper()
	p, err := eng.Peek(context.Background(), "k", "inflight")
	if err != nil {
		t.Fatal(err)
	}
	return p[0].Remaining
}

var errTimeout = errors.New("timeout")

// A timeout middleware between two layers runs the inner one on its own
// goroutine and returns first: the State stays the request's until the
// inner layer is done, which then finds its decision whole and gives its
// slot back; meanwhile another request gets another State.
func TestInnerLayerOutlivesFirst(t *testing.T) {
	eng := engine(t)
	outer, inner := eng.MustLayer(core.Use("outer")), eng.MustLayer(core.Use("inflight"))
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var first *State[*fake]
	var results int
	c := &fake{fc: newFC(), next: func(c *fake) error {
		first = c.fc.UserValue(key[*fake]{}).(*State[*fake])
		go func() { // the timeout middleware's goroutine
			defer close(done)
			ic := &fake{fc: c.fc, next: func(ic *fake) error {
				close(entered)
				<-release
				if d := fakeRouter.Decision(ic); d != nil {
					results = len(d.Results)
				}
				return nil
			}}
			if err := fakeRouter.Serve(inner, ic, nil); err != nil {
				t.Errorf("inner layer: %v", err)
			}
		}()
		<-entered
		return errTimeout
	}}
	if err := fakeRouter.Serve(outer, c, nil); !errors.Is(err, errTimeout) {
		t.Fatalf("first layer returned %v, want the timeout's error", err)
	}
	if n := free(t, eng); n != 1 {
		t.Fatalf("%d free slots while the inner layer runs, want 1", n)
	}
	for range 50 {
		var other *State[*fake]
		oc := &fake{fc: newFC(), next: func(oc *fake) error {
			other = oc.fc.UserValue(key[*fake]{}).(*State[*fake])
			return nil
		}}
		_ = fakeRouter.Serve(outer, oc, nil)
		if other == first {
			t.Fatal("another request got the State of a request whose inner layer still runs")
		}
	}
	close(release)
	<-done
	if results != 2 {
		t.Errorf("inner handler saw %d results after the first layer returned, want 2", results)
	}
	if n := free(t, eng); n != 2 {
		t.Errorf("%d free slots after the inner layer returned, want 2", n)
	}
	if fakeRouter.Decision(c) != nil {
		t.Error("a decision after every layer returned")
	}
}

// Once the first layer has returned, the router has the request back: a
// layer still running writes nothing to the response, runs no more of the
// chain and reads no status, and a layer arriving then does nothing.
func TestNothingAfterFirstReturned(t *testing.T) {
	eng := engine(t)
	outer := eng.MustLayer(core.Use("outer"))
	fc := newFC()
	var st *State[*fake]
	c := &fake{fc: fc, next: func(c *fake) error {
		st = fc.UserValue(key[*fake]{}).(*State[*fake])
		if st.join(fc, c, nil) != joined {
			t.Fatal("a later layer could not join")
		}
		return nil
	}}
	if err := fakeRouter.Serve(outer, c, nil); err != nil {
		t.Fatal(err)
	}
	// st stands for the joined layer, still running.
	fc.Response.Reset()
	st.SetHeader("X-After", "1")
	st.DelHeader("Content-Type")
	if err := st.Deny(nil, core.Denial{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}, Body: []byte("denied")}); err != nil {
		t.Errorf("Deny after the first layer returned: %v", err)
	}
	ran := false
	c.next = func(*fake) error { ran = true; return nil }
	if status, err := st.Next(true); status != 0 || err != nil || ran {
		t.Errorf("Next after the first layer returned: %d %v, chain ran %v; want 0, nil, false", status, err, ran)
	}
	if fc.Response.StatusCode() != http.StatusOK || len(fc.Response.Body()) != 0 ||
		len(fc.Response.Header.Peek("X-After")) != 0 || len(fc.Response.Header.Peek("Retry-After")) != 0 ||
		len(fc.Response.Header.ContentType()) == 0 {
		t.Errorf("the response changed after the first layer returned:\n%s", fc.Response.String())
	}
	// The late layer read the fasthttp context before the router released
	// the request; it must read nothing more of it (a timeout
	// middleware's goroutine can lose the processor for as long as the
	// router takes to answer and release).
	late := &fake{fc: fc, released: true, next: func(*fake) error { ran = true; return nil }}
	if err := fakeRouter.Serve(outer, late, nil); err != nil || ran {
		t.Errorf("a layer arriving after the first returned: %v, chain ran %v", err, ran)
	}
	st.leave(false)
	if st.fc != nil {
		t.Error("the last layer out did not return the State")
	}
	// A user value left by finished layers does not stop a new first
	// layer (Fiber's RestartRouting runs them again).
	again := &fake{fc: fc, next: func(*fake) error { ran = true; return nil }}
	if err := fakeRouter.Serve(outer, again, nil); err != nil || !ran {
		t.Errorf("a layer after every layer finished: %v, chain ran %v; want it limited and run", err, ran)
	}
}

// A denial of a layer whose request context has ended (a shaping wait cut
// short by a timeout middleware) writes nothing and returns the context's
// error, for whatever ended it to answer.
func TestDenyAfterContextEnded(t *testing.T) {
	eng := engine(t)
	outer := eng.MustLayer(core.Use("outer"))
	fc := newFC()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &fake{fc: fc, next: func(*fake) error {
		st := fc.UserValue(key[*fake]{}).(*State[*fake])
		if st.join(fc, &fake{fc: fc, ctx: ctx}, nil) != joined {
			t.Fatal("a later layer could not join")
		}
		defer st.leave(false)
		fc.Response.Reset()
		err := st.Deny(nil, core.Denial{Status: http.StatusServiceUnavailable, Body: []byte("x")})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Deny with an ended context returned %v, want context.Canceled", err)
		}
		if fc.Response.StatusCode() != http.StatusOK || len(fc.Response.Body()) != 0 {
			t.Errorf("Deny with an ended context wrote %d %q", fc.Response.StatusCode(), fc.Response.Body())
		}
		return nil
	}}
	if err := fakeRouter.Serve(outer, c, nil); err != nil {
		t.Fatal(err)
	}
}

// A released request (Fiber v2 clears the Ctx's fasthttp context) is left
// alone.
func TestReleasedRequest(t *testing.T) {
	eng := engine(t)
	ran := false
	c := &fake{next: func(*fake) error { ran = true; return nil }}
	if err := fakeRouter.Serve(eng.MustLayer(core.Use("outer")), c, nil); err != nil || ran {
		t.Errorf("released request: %v, chain ran %v", err, ran)
	}
	if fakeRouter.Decision(c) != nil {
		t.Error("a decision for a released request")
	}
}

// A layer that reaches a State while the request's first layer runs alone
// (before it calls the rest of the chain, where the request's own layers
// run) belongs to another request: it kept a context the router has
// recycled since. It is turned away: it decides nothing, runs nothing
// and leaves the first layer's decision as it was.
func TestStrangerTurnedAway(t *testing.T) {
	eng := engine(t)
	inner := eng.MustLayer(core.Use("inflight"))
	fc := newFC()
	strangerRan := false
	stranger := &fake{fc: fc, next: func(*fake) error { strangerRan = true; return nil }}
	var strangerErr error
	outer := eng.MustLayer(core.Use("outer"), core.Skip(func(*core.Request) bool {
		// During the first layer's decision. A stranger let in would wait
		// for the state's lock, which the deciding layer holds.
		done := make(chan struct{})
		go func() {
			defer close(done)
			strangerErr = fakeRouter.Serve(inner, stranger, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the stranger waits for the first layer's state: it was let in")
		}
		return false
	}))
	var results int
	c := &fake{fc: fc, next: func(c *fake) error {
		if d := fakeRouter.Decision(c); d != nil {
			results = len(d.Results)
		}
		return nil
	}}
	if err := fakeRouter.Serve(outer, c, nil); err != nil {
		t.Fatal(err)
	}
	if strangerRan || strangerErr != nil {
		t.Errorf("the stranger's chain ran (%v) or it returned %v; want it turned away", strangerRan, strangerErr)
	}
	if results != 1 {
		t.Errorf("the request's handler saw %d results, want 1 (outer alone)", results)
	}
	if n := free(t, eng); n != 2 {
		t.Errorf("%d free slots, want 2: the stranger took none", n)
	}
}
