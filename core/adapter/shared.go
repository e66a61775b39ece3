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
// Fiber) must not be reached by a layer after that: a layer brackets each
// use of the router's context with [Shared.Use] and [Shared.Release].
//
// The zero Shared holds no state; [Shared.Start] gives it one. Its
// methods are safe for concurrent use.
type Shared[S any] struct {
	refs  atomic.Int32
	state atomic.Pointer[S]
	mu    sync.Mutex
	gone  bool // the outermost layer has returned
}

// Start gives s the request's state st and the outermost layer's
// reference. Call it once, before s is visible to another layer.
func (s *Shared[S]) Start(st *S) {
	s.refs.Store(1)
	s.state.Store(st)
}

// Enter takes a reference for a layer other than the outermost and returns
// the state; nil when every layer of the request has already finished (a
// handler kept the request past its end): serve the request unlimited
// then, and do not call Leave.
func (s *Shared[S]) Enter() *S {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return nil
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return s.state.Load()
		}
	}
}

// Leave drops the caller's reference; outermost says the caller is the
// layer that called Start, whose return hands the request back to the
// router. It returns the state when the caller was the last layer out,
// for it to reset and reuse, else nil.
func (s *Shared[S]) Leave(outermost bool) *S {
	if outermost {
		s.mu.Lock()
		s.gone = true
		s.mu.Unlock()
	}
	if s.refs.Add(-1) != 0 {
		return nil
	}
	return s.state.Swap(nil)
}

// State returns the request's state, or nil once every layer has left.
func (s *Shared[S]) State() *S { return s.state.Load() }

// Use locks s for a use of the router's own request context, and reports
// whether the layer may make it: the outermost layer has not returned, so
// the router has not handed its context to another request. Call Release
// when done, whatever Use reported.
func (s *Shared[S]) Use() bool {
	s.mu.Lock()
	return !s.gone
}

// Release ends a use that Use began.
func (s *Shared[S]) Release() { s.mu.Unlock() }
