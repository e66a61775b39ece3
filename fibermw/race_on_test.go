//go:build race

package fibermw_test

// timeoutStatus is what the suite's TimeoutChain check expects from Fiber's
// timeout.New, or 0 to skip that check. Under the race detector it is 0:
// timeout.New keeps running the handler on a Ctx that Fiber releases and
// recycles when the middleware returns (its documentation warns of data
// races), and the detector reports Fiber's own accesses to it.
const timeoutStatus = 0
