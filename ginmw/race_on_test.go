//go:build race

package ginmw_test

// timeoutStatus is what the suite's TimeoutChain check expects from
// gin-contrib/timeout, or 0 to skip that check. Under the race detector it
// is 0: the middleware runs the rest of the chain on a goroutine of its
// own on the request's *gin.Context, which it aborts, and Gin recycles,
// when the time is up, and the detector reports those accesses of its own.
const timeoutStatus = 0
