// Command kubectl-retryguard is the kubectl plugin for Retryguard: it shows
// how layers multiply across a call tree (graph), why one policy is or is not
// in force (explain), and checks manifests against the admission rules
// without a cluster (lint). Installed on PATH, it runs as
// `kubectl retryguard ...`.
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
