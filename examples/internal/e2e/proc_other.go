//go:build unix && !linux

package e2e

import "syscall"

func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
