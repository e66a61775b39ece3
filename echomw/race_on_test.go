//go:build race

package echomw_test

// timeoutStatus is what the suite's TimeoutChain check expects from Echo's
// Timeout middleware, or 0 to skip that check. Under the race detector it
// is 0: the middleware runs the rest of the chain on a goroutine of its
// own with the request's echo.Context, which Echo resets for another
// request once the middleware returns (Echo's documentation warns of data
// races), and the detector reports those accesses of Echo's own.
const timeoutStatus = 0
