// Command dev-cluster runs the local control plane in the foreground for
// hands-on work: `make dev-cluster`, then
// `kubectl --kubeconfig bin/dev/kubeconfig apply -f ...` from another shell.
// Interrupt it to stop and clean up.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/retryguard/retryguard/hack/devenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dev-cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	env, err := devenv.NewEnvironment()
	if err != nil {
		return err
	}
	kubeconfig := devenv.Path("bin", "dev", "kubeconfig")
	cluster, err := devenv.StartCluster(env, kubeconfig)
	if err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)

	fmt.Printf("API server: %s\n", cluster.Config.Host)
	fmt.Printf("Try:        kubectl --kubeconfig %s apply -k config/samples\n", "bin/dev/kubeconfig")
	fmt.Println("retryguard dev cluster ready")

	<-stop
	fmt.Println("stopping the dev cluster")
	return cluster.Stop()
}
