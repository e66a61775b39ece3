package limittest

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/core/adaptive"
)

// Overload checks a layer with a guard (core.GuardBy) holding an
// adaptive limit pinned at one request in flight, inside a layer with a
// budget: a request arriving while another is in the handler is shed with
// 503, Retry-After and a problem body saying the server is overloaded, and
// the outer layer's charge is given back; the place is given back after
// the handler returns, after it panics, and after a later layer denies.
func Overload(t *testing.T, cfg Config) {
	eng := engine(t, cfg,
		core.Budget{Name: "outer", Algorithm: core.SlidingLog, Quota: 100, Window: time.Hour, Key: byClient},
		core.Budget{Name: "inner", Algorithm: core.SlidingLog, Quota: 1, Window: time.Hour, Key: byClient})
	one := newOneInFlight(t, "overload")
	lim, block, boom, unblock := one.lim, one.block, one.boom, one.unblock
	app := App{Groups: []Group{{
		Prefix: "/o",
		Layers: []*core.Layer{layer(t, eng, core.Use("outer")), layer(t, eng, core.GuardBy(lim))},
		Routes: []Route{
			block, boom,
			route(http.MethodGet, "/ok", nil),
			route(http.MethodGet, "/denied", nil, layer(t, eng, core.Use("inner"))),
		},
	}}}
	c := newClient(t, cfg.Serve(t, app))
	id := newID()

	r := c.do(http.MethodGet, "/o/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "first request")
	wantLimits(t, r, "first request", "outer", 99)

	blocked := one.hold(t, c, "/o/block", ClientHeader, id)
	r = c.do(http.MethodGet, "/o/ok", ClientHeader, id)
	if wantStatus(t, r, http.StatusServiceUnavailable, "request while the limit is full") {
		wantHeader(t, r, core.HeaderRetryAfter, "1", "shed request")
		wantHeader(t, r, core.HeaderCacheControl, "no-store", "shed request")
		wantProblem(t, r, http.StatusServiceUnavailable, core.ProblemReducedCapacity, "", 1, "shed request")
		if !strings.Contains(r.Body, "overloaded") {
			t.Errorf("shed request: body %q does not say the server is overloaded", r.Body)
		}
		// The outer layer's charge is given back: 98 left, as after the
		// first two requests.
		wantLimits(t, r, "shed request", "outer", 98)
	}
	unblock()
	wantStatus(t, <-blocked, http.StatusOK, "blocking request")

	wantStatus(t, c.do(http.MethodGet, "/o/panic", ClientHeader, id), http.StatusInternalServerError, "panicking handler")
	r = c.do(http.MethodGet, "/o/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "request after a panic")
	wantLimits(t, r, "request after a panic", "outer", 96)

	wantStatus(t, c.do(http.MethodGet, "/o/denied", ClientHeader, id), http.StatusOK, "inner budget's first request")
	wantStatus(t, c.do(http.MethodGet, "/o/denied", ClientHeader, id), http.StatusTooManyRequests, "inner budget's second request")
	r = c.do(http.MethodGet, "/o/ok", ClientHeader, id)
	wantStatus(t, r, http.StatusOK, "request after a later layer denied")
	wantLimits(t, r, "request after a later layer denied", "outer", 94)

	s := lim.Stats()
	if s.InFlight != 0 || s.Shed != [3]int64{1, 0, 0} {
		t.Errorf("limit after the sequence: %+v, want nothing in flight and one request shed", s)
	}
}

// ShedOnly checks a layer that only guards (core/adapter.ShedBy, as the
// adapters' ShedBy functions build), with an adaptive limit pinned at one
// request in flight: a request arriving while another is in the handler
// is shed with 503 and Retry-After, no response carries a rate-limit
// field, and the place is given back after the handler returns and after
// it panics.
func ShedOnly(t *testing.T, cfg Config) {
	one := newOneInFlight(t, "shed")
	lim, block, boom, unblock := one.lim, one.block, one.boom, one.unblock
	app := App{Groups: []Group{{
		Prefix: "/s",
		Layers: []*core.Layer{adapter.MustShedBy(lim)},
		Routes: []Route{block, boom, route(http.MethodGet, "/ok", nil)},
	}}}
	c := newClient(t, cfg.Serve(t, app))
	noFields := func(r response, what string) {
		t.Helper()
		wantNoHeader(t, r, what, core.HeaderPolicy, core.HeaderRateLimit)
	}
	r := c.do(http.MethodGet, "/s/ok")
	wantStatus(t, r, http.StatusOK, "first request")
	noFields(r, "first request")

	blocked := one.hold(t, c, "/s/block")
	r = c.do(http.MethodGet, "/s/ok")
	if wantStatus(t, r, http.StatusServiceUnavailable, "request while the limit is full") {
		wantHeader(t, r, core.HeaderRetryAfter, "1", "shed request")
		noFields(r, "shed request")
	}
	unblock()
	wantStatus(t, <-blocked, http.StatusOK, "blocking request")
	wantStatus(t, c.do(http.MethodGet, "/s/panic"), http.StatusInternalServerError, "panicking handler")
	wantStatus(t, c.do(http.MethodGet, "/s/ok"), http.StatusOK, "request after a panic")
	if s := lim.Stats(); s.InFlight != 0 || s.Shed != [3]int64{1, 0, 0} {
		t.Errorf("limit after the sequence: %+v, want nothing in flight and one request shed", s)
	}
}

// oneInFlight is an adaptive limit pinned at one request in flight, a
// route whose handler holds its place until unblock, and a route whose
// handler panics.
type oneInFlight struct {
	lim         *adaptive.Limiter
	block, boom Route
	entered     chan struct{}
	unblock     func()
}

func newOneInFlight(t *testing.T, name string) *oneInFlight {
	lim, err := adaptive.New(adaptive.Config{Name: name, Initial: 1, Min: 1, Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := &oneInFlight{lim: lim, entered: make(chan struct{})}
	release := make(chan struct{})
	var once sync.Once
	o.unblock = func() { once.Do(func() { close(release) }) }
	t.Cleanup(o.unblock)
	o.block = Route{Method: http.MethodGet, Path: "/block", Handle: func() string {
		o.entered <- struct{}{}
		<-release
		return "ok"
	}}
	o.boom = Route{Method: http.MethodGet, Path: "/panic", Handle: func() string { panic("limittest: handler panic") }}
	return o
}

// hold sends a request to path, a route of o.block, and returns once its
// handler holds the limit's place; its response arrives after o.unblock.
func (o *oneInFlight) hold(t *testing.T, c *client, path string, hdr ...string) <-chan response {
	t.Helper()
	blocked := make(chan response, 1)
	go func() {
		r, err := c.send(http.MethodGet, path, hdr...)
		if err != nil {
			t.Error(err)
		}
		blocked <- r
	}()
	select {
	case <-o.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking handler did not start")
	}
	return blocked
}
