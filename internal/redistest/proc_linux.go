//go:build linux

package redistest

import "syscall"

// procAttr puts the server in its own process group and kills it if the
// test binary dies without running its cleanups (a test timeout).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
