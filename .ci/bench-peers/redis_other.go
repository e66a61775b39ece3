//go:build !linux

package benchpeers

import "os/exec"

// dieWithParent does nothing here: Stop ends the server.
func dieWithParent(*exec.Cmd) {}
