package adapter

import (
	"sync"
	"sync/atomic"
)

// Shared holds the state S that the stacked layers of one request share
// (a struct embedding core.RequestState), and says when it may be reused.
//
// A request's layers usually run one inside the other on one goroutine,
// but a timeout middleware between two of them runs the inner ones on a
// goroutine of its own and returns to the outer ones when its time is up,
// while they still run. So the outermost layer, which creates the state,
// must not reuse it when it returns: every layer holds a reference while
// it runs ([Shared.Enter], [Shared.Leave]), and the last one out gets the
// state back to reset and pool. And a router that recycles its own
// request context when the outermost middleware returns (Gin, Echo,
// Fiber) must not be reached by a layer after that: a layer other than
// the outermost brackets each use of the router's context with
// [Shared.Use] and [Shared.Release]. (The outermost layer needs no
// bracket: the router recycles its context only once that layer returns.)
//
// The zero Shared holds no state; [Shared.Start] gives it one. Its
// methods other than Start are safe for concurrent use. The adapters of
// every router quotagate supports count their layers with it, Fiber's
// included.
//
// A request with one layer, or whose layers all run on one goroutine,
// costs one atomic operation here: the outermost layer's Leave, which
// finds no other layer holding the state and takes it back.
type Shared[S any] struct {
	refs  int32 // layers holding the state; read and changed atomically
	state *S    // set by Start, before refs
	mu    sync.Mutex
	gone  bool // the outermost layer has returned
}

// Start gives s the request's state st and the outermost layer's
// reference. Call it before s is visible to another layer of the request.
// A Shared whose layers have all left may be started again, for another
// request (an adapter that pools its Shared with its state, as one keeps
// it in the router's request context, does): a layer that still holds s
// from the earlier request can then take a reference ([Shared.Enter]) to
// the new one, and must check, holding it, that s serves its request.
func (s *Shared[S]) Start(st *S) {
	s.state = st
	s.gone = false
	atomic.StoreInt32(&s.refs, 1) // publishes state and gone to Enter
}

// Enter takes a reference for a layer other than the outermost and returns
// the state; nil when every layer of the request has already finished (a
// handler kept the request past its end): serve the request unlimited
// then, and do not call Leave.
func (s *Shared[S]) Enter() *S {
	for {
		n := atomic.LoadInt32(&s.refs)
		if n <= 0 {
			return nil
		}
		if atomic.CompareAndSwapInt32(&s.refs, n, n+1) {
			return s.state
		}
	}
}

// Leave drops the caller's reference; outermost says the caller is the
// layer that called Start, whose return hands the request back to the
// router. It returns the state when the caller was the last layer out,
// for it to reset and reuse, else nil.
func (s *Shared[S]) Leave(outermost bool) *S {
	if outermost {
		// No other layer holds a reference: none can be using the
		// router's context, and none can take one from now on.
		if atomic.CompareAndSwapInt32(&s.refs, 1, 0) {
			return s.state
		}
		s.mu.Lock()
		s.gone = true
		s.mu.Unlock()
	}
	if atomic.AddInt32(&s.refs, -1) != 0 {
		return nil
	}
	return s.state
}

// State returns the request's state, or nil once every layer has left.
func (s *Shared[S]) State() *S {
	if atomic.LoadInt32(&s.refs) <= 0 {
		return nil
	}
	return s.state
}

// Use locks s for a use of the router's own request context by a layer
// other than the outermost, and reports whether the layer may make it:
// the outermost layer has not returned, so the router has not handed its
// context to another request. Call Release when done, whatever Use
// reported.
func (s *Shared[S]) Use() bool {
	s.mu.Lock()
	return !s.gone
}

// Release ends a use that Use began.
func (s *Shared[S]) Release() { s.mu.Unlock() }
