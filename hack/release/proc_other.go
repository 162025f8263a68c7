//go:build !unix

package main

import "os/exec"

// inOwnGroup leaves cmd as exec.CommandContext makes it: killed alone on
// cancellation. Process groups are a Unix notion; releases are cut on Unix.
func inOwnGroup(*exec.Cmd) {}
