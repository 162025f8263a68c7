// Command kal runs Kube API Linter (sigs.k8s.io/kube-api-linter) over the
// API types with its default linters, as a plain go/analysis program, so the
// project needs neither golangci-lint nor a plugin build.
//
//	go run . ../../api/...      (from hack/kal)
//
// It exits non-zero when any linter reports a finding. A linter is switched
// off only in disabled, configured only in lintersConfig, and a single field
// is excused from a single linter only in exceptions, each with its reason.
package main

import (
	"fmt"
	"os"
	"regexp"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/multichecker"
	"sigs.k8s.io/kube-api-linter/pkg/analysis/registry"
	"sigs.k8s.io/kube-api-linter/pkg/config"

	// Registers every linter Kube API Linter ships.
	_ "sigs.k8s.io/kube-api-linter/pkg/registration"
)

// disabled lists the default linters this API opts out of, with the reason.
var disabled = map[string]string{}

// lintersConfig departs from a linter's defaults, with the reason. None do.
var lintersConfig = config.LintersConfig{}

// writtenByControllers is the reason shared by the optional status fields:
// only the controllers write them, never users, so an absent and a zero
// value mean the same (not yet observed), and a pointer would only add a
// nil check to every reader. Spec fields keep their pointers, where absence
// means "take the default".
const writtenByControllers = "a status field only the controllers write; absent and zero mean the same"

// rangedInCEL is the reason shared by the required integer and duration
// fields whose bounds are a CEL rule rather than Minimum/Maximum markers.
const rangedInCEL = "its bounds are a CEL rule carrying a stable ERR_ code (the linter reads only " +
	"Minimum/Maximum/MinLength markers, and adding them would make the API server report a second, " +
	"uncoded error for the same value); the zero value is refused, so the field needs no pointer"

// emptyListMeansNone is the reason for retryOn.statusCodes' omitzero: an
// empty list ([]) is a value of its own, "retry no status", which lets a
// keyless policy retry only failures that prove the request never left;
// omitempty would drop it from every object a Go client writes, and the API
// server would then apply the default [429, 503, 504] in its place.
const emptyListMeansNone = "an empty list is a value of its own (retry no status, see maxAttempts); omitempty would turn it " +
	"into the default on every write from a Go client, omitzero omits only an absent list"

// exceptions excuses one field ("Type.Field") from one linter, with the reason.
var exceptions = map[string]map[string]string{
	"defaults": {
		"RetryOn.StatusCodes": emptyListMeansNone,
	},
	"requiredfields": {
		"RetryPolicySpec.MaxAttempts":   rangedInCEL,
		"RetryPolicySpec.Deadline":      rangedInCEL,
		"RetryBudgetSpec.RetryPercent":  rangedInCEL,
		"ConnectionPool.MaxConnections": rangedInCEL,
		"Hedging.MaxHedges":             rangedInCEL,
		"HedgeLatency.Percentile":       rangedInCEL,
		"RetryBudget.Spec":              "RetryBudgetSpec's only required field, retryPercent, is " + rangedInCEL,
	},
	"optionalfields": {
		"RetryOn.StatusCodes":                  emptyListMeansNone,
		"RetryPolicyStatus.ObservedGeneration": writtenByControllers,
		"RetryPolicyStatus.LeafAttempts":       writtenByControllers,
		"RetryPolicyStatus.ConfigMapName":      writtenByControllers,
		"RetryBudgetStatus.ObservedGeneration": writtenByControllers,
		"RetryBudgetStatus.PolicyCount":        writtenByControllers,
		"RetryPolicy.Status":                   writtenByControllers,
		"RetryBudget.Status":                   writtenByControllers,
	},
}

func main() {
	cfg := config.Linters{}
	for name := range disabled {
		cfg.Disable = append(cfg.Disable, name)
	}
	analyzers, err := registry.DefaultRegistry().InitializeLinters(cfg, lintersConfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kal:", err)
		os.Exit(2)
	}
	for _, a := range analyzers {
		excuse(a, exceptions[a.Name])
	}
	multichecker.Main(analyzers...)
}

// excuse drops a's findings about the listed fields. A finding names its
// field as "Type.Field", which is matched as a whole word.
func excuse(a *analysis.Analyzer, fields map[string]string) {
	if len(fields) == 0 {
		return
	}
	patterns := make([]*regexp.Regexp, 0, len(fields))
	for f := range fields {
		patterns = append(patterns, regexp.MustCompile(`\b`+regexp.QuoteMeta(f)+`\b`))
	}
	run := a.Run
	a.Run = func(pass *analysis.Pass) (any, error) {
		report := pass.Report
		pass.Report = func(d analysis.Diagnostic) {
			for _, p := range patterns {
				if p.MatchString(d.Message) {
					return
				}
			}
			report(d)
		}
		return run(pass)
	}
}
