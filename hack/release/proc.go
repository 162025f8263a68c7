package main

import (
	"context"
	"os/exec"
	"time"
)

// goCommand is the go command with args in dir, run in a process group of its
// own that is killed whole once ctx is done (inOwnGroup): the go command starts
// compilers, linkers and the programs it runs as children of its own, and
// killing it alone, as exec.CommandContext does, leaves them running.
func goCommand(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	inOwnGroup(cmd)
	// A grandchild that outlived the kill would hold the output pipe open.
	cmd.WaitDelay = 10 * time.Second
	return cmd
}
