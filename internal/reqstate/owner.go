package reqstate

import (
	"context"
	"sync"
	"unsafe"

	"github.com/quotagate/quotagate/core"
)

// Gin and Echo hand every middleware and handler of a request the same
// per-request object of their own (the *gin.Context, Echo v4's
// *echo.Response, Echo v5's *echo.Context), which they pool and hand to
// another request once the outermost middleware returns. Their adapters
// find the request's Context by that object, its owner, instead of
// replacing the request with one whose context carries it: the copy
// (http.Request.WithContext) cost a quarter of the middleware's time.

// owners maps each owner with a quotagate layer running to its request's
// Context. The outermost layer adds the entry and removes it when it
// returns, before the router can recycle the owner.
var owners registry

// registry is a map from owner to Context, in shards that each have a
// lock of their own, so that requests on different cores rarely meet.
type registry struct {
	shards [64]shard
}

type shard struct {
	mu sync.Mutex
	m  map[unsafe.Pointer]*Context
	_  [48]byte // one shard per cache line
}

func (g *registry) shard(owner unsafe.Pointer) *shard {
	h := uint64(uintptr(owner)) * 0x9e3779b97f4a7c15 // Fibonacci hashing
	return &g.shards[h>>(64-6)]
}

// EnterOwned is Enter for a request whose router hands every layer the
// same owner object. When no layer of the request runs yet, it creates
// the Context and State, with parent (the request's context) as the
// Context's parent, and reports created; the caller does not make c the
// request's context (DecisionOwned finds it by owner). Otherwise it joins
// the request's Context: while the entry is there, the outermost layer's
// reference keeps the State, so st is never nil. A layer that comes after
// the outermost one returned (a handler kept the owner past the request's
// end) finds nothing and starts afresh: the router has recycled the owner
// by then, and whatever the layer does with it is the router's race, as
// every use of the owner would be. The caller calls c.Leave when its layer
// is done, and does not use c after: the Context is pooled with the State.
func EnterOwned[O any](owner *O, parent context.Context) (c *Context, st *State, created bool) {
	return enterOwned(unsafe.Pointer(owner), parent)
}

func enterOwned(owner unsafe.Pointer, parent context.Context) (c *Context, st *State, created bool) {
	sh := owners.shard(owner)
	sh.mu.Lock()
	if c = sh.m[owner]; c != nil {
		st = c.Shared.Enter()
		sh.mu.Unlock()
		return c, st, false
	}
	if sh.m == nil {
		sh.m = make(map[unsafe.Pointer]*Context)
	}
	st = pool.Get().(*State)
	c = &st.owned
	c.Context, c.owner = parent, owner
	c.Start(st)
	sh.m[owner] = c
	sh.mu.Unlock()
	return c, st, true
}

// DecisionOwned returns the decision of the request whose owner is owner,
// or nil outside a quotagate layer or once its layers have finished.
func DecisionOwned[O any](owner *O) *core.Decision {
	p := unsafe.Pointer(owner)
	sh := owners.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock() // while the entry is there, the State is the request's
	if c := sh.m[p]; c != nil {
		if st := c.State(); st != nil {
			return &st.Decision
		}
	}
	return nil
}

// forget removes c's entry, for the outermost layer's return.
func (c *Context) forget() {
	sh := owners.shard(c.owner)
	sh.mu.Lock()
	if sh.m[c.owner] == c {
		delete(sh.m, c.owner)
	}
	sh.mu.Unlock()
}
