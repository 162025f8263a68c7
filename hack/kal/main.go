// Command kal runs Kube API Linter (sigs.k8s.io/kube-api-linter) over the
// API types with its default linters, as a plain go/analysis program, so the
// project needs neither golangci-lint nor a plugin build.
//
//	go run . ../../api/...      (from hack/kal)
//
// It exits non-zero when any linter reports a finding. A linter is switched
// off only in disabled below, each with the reason it does not apply here.
package main

import (
	"fmt"
	"os"

	"golang.org/x/tools/go/analysis/multichecker"
	"sigs.k8s.io/kube-api-linter/pkg/analysis/registry"
	"sigs.k8s.io/kube-api-linter/pkg/config"

	// Registers every linter Kube API Linter ships.
	_ "sigs.k8s.io/kube-api-linter/pkg/registration"
)

// disabled lists the default linters this API opts out of, with the reason.
var disabled = map[string]string{}

func main() {
	cfg := config.Linters{}
	for name := range disabled {
		cfg.Disable = append(cfg.Disable, name)
	}
	analyzers, err := registry.DefaultRegistry().InitializeLinters(cfg, config.LintersConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kal:", err)
		os.Exit(2)
	}
	multichecker.Main(analyzers...)
}
