//go:build !race

package echomw_test

import "net/http"

// timeoutStatus is what the suite's TimeoutChain check expects from Echo's
// Timeout middleware (see race_on_test.go).
const timeoutStatus = http.StatusServiceUnavailable
