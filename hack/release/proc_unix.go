//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// inOwnGroup starts cmd as the leader of a new process group and makes its
// cancellation a SIGKILL to the whole group. In a group of its own the command
// no longer receives the terminal's SIGINT, so whoever cancels it must kill
// it: the test binary does on SIGINT and SIGTERM (TestMain), and so does main.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
