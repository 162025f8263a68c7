// Command e2e-cluster brings up the single-node end-to-end cluster, prints
// where its kubeconfig is, and tears it down on SIGINT or SIGTERM.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/retryguard/retryguard/hack/e2e/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "e2e-cluster: [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := cluster.RepoRoot(wd)
	if err != nil {
		return err
	}
	opts, err := cluster.Assets(ctx, root, logf)
	if err != nil {
		return err
	}
	up := time.Now()
	c, err := cluster.Up(ctx, opts)
	if err != nil {
		return err
	}
	logf("cluster up in %s", time.Since(up).Round(100*time.Millisecond))
	fmt.Println("retryguard e2e cluster ready")
	fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Printf("# registry: https://%s (CA %s)\n", c.Registry, c.RegistryCA)
	fmt.Println("Press Ctrl-C to tear it down.")
	<-ctx.Done()
	stop()
	down := time.Now()
	logf("tearing down")
	if err := c.Down(); err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	logf("torn down in %s", time.Since(down).Round(100*time.Millisecond))
	return nil
}
