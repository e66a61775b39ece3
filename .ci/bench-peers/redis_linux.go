package benchpeers

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel end the redis-server when this process
// ends, however it ends (a benchmark's timeout included).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
