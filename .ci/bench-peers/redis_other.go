//go:build !linux

package benchpeers

import (
	"os/exec"
	"time"
)

// dieWithParent does nothing here: Stop ends the server.
func dieWithParent(*exec.Cmd) {}

// sleep is time.Sleep here.
func sleep(d time.Duration) { time.Sleep(d) }
