// Command dev-cluster runs the local control plane in the foreground for
// hands-on work: `make dev-cluster`, then
// `kubectl --kubeconfig bin/dev/kubeconfig apply -f ...` from another shell.
// The manager runs in-process with its webhooks served for real, and
// kube-controller-manager's garbage collector and namespace controller run
// beside it, so deleting a policy removes its ConfigMap and deleting a
// namespace empties and removes it, as in a real cluster; pass
// --max-leaf-attempts or --max-retry-percent to try other platform limits.
// Interrupt it to stop and clean up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dev-cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	var limits policygraph.Limits
	options.BindPlatformLimits(flag.CommandLine, &limits)
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	kubeconfig := testenv.Path("bin", "dev", "kubeconfig")
	cluster, err := testenv.Up(context.Background(), kubeconfig, limits)
	if err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)

	fmt.Printf("API server: %s (the manager and its webhooks run in this process)\n", cluster.Config.Host)
	fmt.Printf("Controllers: kube-controller-manager's %s (log: %s)\n", testenv.ControllerManagerControllers, cluster.ControllerManager.LogPath)
	fmt.Printf("Try:        kubectl --kubeconfig %s apply -k config/samples\n", "bin/dev/kubeconfig")
	fmt.Printf(
		"Then:       kubectl --kubeconfig %s delete rp sms-2fa-dispatch   # its ConfigMap goes within %s\n",
		"bin/dev/kubeconfig",
		testenv.CollectionDeadline,
	)
	fmt.Println("retryguard dev cluster ready")

	<-stop
	fmt.Println("stopping the dev cluster")
	return cluster.Stop()
}
