package benchpeers

import (
	"os/exec"
	"syscall"
	"time"
)

// dieWithParent has the kernel end the redis-server when this process
// ends, however it ends (a benchmark's timeout included).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// sleep blocks the calling thread in the kernel for d: Go's timers wake a
// sub-millisecond sleep about a millisecond late when the process is idle.
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
