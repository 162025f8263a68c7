// Command manager runs Retryguard's controllers and admission webhooks;
// internal/manager builds it.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/retryguard/retryguard/internal/manager"
)

// version and revision are stamped by make image (-X main.version=…,
// -X main.revision=…) and logged at start, so a pod's log names its build.
var (
	version  = "dev"
	revision = "unknown"
)

func main() {
	if err := manager.Run(ctrl.SetupSignalHandler(), os.Args[1:], manager.Build{Version: version, Revision: revision}); err != nil {
		ctrl.Log.WithName("setup").Error(err, "manager failed")
		os.Exit(1)
	}
}
