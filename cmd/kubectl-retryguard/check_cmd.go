package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/check"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
)

func newCheckCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that Retryguard is installed and working",
		Long: `Check that Retryguard is installed and working: the CRDs are established, the
validating webhook is configured and answers (a dry-run RetryPolicy that is its own
parent, which only the webhook refuses; nothing is stored), its CA stays valid,
the ValidatingAdmissionPolicy that reserves the published ConfigMaps is bound,
and a manager holds a fresh leader Lease. One line per check; exit 0 when all
pass, 1 when any fails, 4 when the cluster cannot be reached.`,
		Example: `  kubectl retryguard check
  kubectl retryguard check -n my-team --manager-namespace platform-retryguard
  kubectl retryguard check -o json | jq '.checks[] | select(.passed | not)'`,
		Args: cobra.NoArgs,
	}
	cf := clusterFlags(cmd)
	opts := check.Options{}
	cmd.Flags().StringVar(&opts.ManagerNamespace, "manager-namespace", "",
		"The manager's namespace, which holds its leader Lease (default: the webhook Service's, else "+check.DefaultManagerNamespace+").")
	cmd.Flags().DurationVar(&opts.MinValidity, "min-validity", check.DefaultMinValidity, "How long the webhook's CA must stay valid.")
	format := outputFlag(cmd, outputText)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(cmd, *format, outputText); err != nil {
			return err
		}
		c, ns, err := connect(cf)
		if err != nil {
			return exitf(exitUnreadable, "check: %v", err)
		}
		opts.Namespace, opts.Now = ns, time.Now
		res := check.Run(cmd.Context(), c, opts)
		if res.Unreachable != "" && !output.IsMachine(*format) {
			return exitf(exitUnreadable, "check: %s\nhint: is the kubeconfig's context the cluster you mean (kubectl config current-context), and is its API server up?",
				res.Unreachable)
		}
		if output.IsMachine(*format) {
			if err := writeOutput(cmd, *format, res); err != nil {
				return err
			}
		} else {
			for _, ch := range res.Checks {
				mark := "ok  "
				if !ch.Passed {
					mark = "FAIL"
				}
				line := fmt.Sprintf("%s %-22s %s", mark, ch.Name, ch.Message)
				if ch.Hint != "" {
					line += " (hint: " + ch.Hint + ")"
				}
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
		}
		if res.Unreachable != "" {
			return exitWith(exitUnreadable)
		}
		if !res.Passed {
			return exitWith(exitRefused)
		}
		return nil
	}
	return cmd
}
