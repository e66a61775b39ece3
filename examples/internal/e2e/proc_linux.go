//go:build linux

package e2e

import "syscall"

// procAttr kills the example if the test binary dies without running its
// cleanups (a test timeout).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
