// Package benchengine is the engine the adapters' benchmarks share.
package benchengine

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
)

// HotEngine returns an engine on a memory store for adapter benchmarks:
// two budgets, "per_ip" and "writes", keyed by keyfunc.PeerIP, with quotas
// no benchmark exhausts, and the given header style. The store is closed
// when tb ends.
func HotEngine(tb testing.TB, style core.HeaderStyle) *core.Engine {
	tb.Helper()
	s := memstore.MustNew(memstore.Config{SweepInterval: -1})
	tb.Cleanup(func() { _ = s.Close() })
	return core.MustNew(core.Config{Store: s, Headers: style, Budgets: []core.Budget{
		{Name: "per_ip", Quota: 1e12, Window: time.Hour, Key: keyfunc.PeerIP()},
		{Name: "writes", Quota: 1e12, Window: time.Hour, Key: keyfunc.PeerIP()},
	}})
}

// Floor is the floor under an adapter's benchmark: a plain middleware of
// the router that asks a layer of a HotEngine (no header fields, budget
// "per_ip") for a decision and does nothing else: no state shared with
// other layers, no header fields, no CountWhen. What an adapter's row
// costs above it is the request sequence of core.Layer.Serve and the
// state that stacked layers share.
type Floor struct {
	l     *core.Layer
	views sync.Pool
}

type floorView struct {
	r core.Request
	d core.Decision
}

// NewFloor returns a Floor whose engine's store is closed when tb ends.
func NewFloor(tb testing.TB) *Floor {
	tb.Helper()
	return &Floor{
		l:     HotEngine(tb, core.HeadersNone).MustLayer(core.Use("per_ip")),
		views: sync.Pool{New: func() any { return new(floorView) }},
	}
}

// Allow decides for the request view r, in a pooled view and decision, and
// reports whether the request is allowed.
func (f *Floor) Allow(r *core.Request) bool {
	v := f.views.Get().(*floorView)
	defer f.views.Put(v)
	v.d.Reset()
	v.r = *r
	f.l.Decide(&v.r, &v.d)
	return v.d.Allowed
}

// AllowHTTP is Allow for the view of an *http.Request: method, path,
// peer address, header and context.
func (f *Floor) AllowHTTP(r *http.Request) bool {
	return f.Allow(&core.Request{Method: r.Method, Path: r.URL.Path, RemoteAddr: r.RemoteAddr, Header: r.Header, Context: r.Context()})
}

// carrier is the smallest context a middleware can attach to a request.
type carrier struct{ context.Context }

// Carry returns a copy of r whose context carries one more value: what a
// middleware pays to hand per-request state to the handlers and
// middleware after it through the request's context.
func Carry(r *http.Request) *http.Request {
	return r.WithContext(&carrier{r.Context()})
}

// FloorName names an adapter's floor row: "floor/decide-copy" when the
// floor carries state in the request's context (Carry), else
// "floor/decide-only".
func FloorName(carry bool) string {
	if carry {
		return "floor/decide-copy"
	}
	return "floor/decide-only"
}
