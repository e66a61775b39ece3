//go:build !race

package ginmw_test

import "net/http"

// timeoutStatus is what the suite's TimeoutChain check expects from
// gin-contrib/timeout (see race_on_test.go).
const timeoutStatus = http.StatusRequestTimeout
