//go:build !race

package fibermw_test

import "github.com/gofiber/fiber/v2"

// timeoutStatus is what the suite's TimeoutChain check expects from Fiber's
// timeout.New (see race_on_test.go).
const timeoutStatus = fiber.StatusRequestTimeout
