//go:build race

package ginmw_test

// timeoutStatus is what the suite's TimeoutChain check expects from
// gin-contrib/timeout, or 0 to skip that check. Under the race detector it
// is 0: the middleware (v1.2.1) runs the rest of the chain on a goroutine
// of its own with the request's *gin.Context while it writes its answer
// from the request's goroutine through the same context (Copy reads
// c.Request, its Writer's Status reads the status it writes), and the
// detector reports those accesses of its own. Since v1.2.1 it waits for
// that goroutine before it returns, so Gin no longer recycles the context
// under it (limittest.TimeoutUnderLoad).
const timeoutStatus = 0
