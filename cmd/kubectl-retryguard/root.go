package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/options"
)

const rootLong = `kubectl retryguard: see and check Retryguard retry policies.

Commands:
  graph    The layer forest (parentRef chains, across namespaces) with each
           path's attempt product, the hidden layers, the budgets and the
           Ready state of every policy. -n shows every tree that touches
           the namespace.
  explain  Why one RetryPolicy is or is not in force: its conditions, its
           product path, its worst-case schedule and its budget share.
  lint     Admit manifests offline with the same single-object and
           cross-object rules as the API server and the admission webhook.
           Exits 1 when anything would be refused. No cluster needed.
  test     Run the policy tests of retryguard-test.yaml files: which
           manifests are admitted and which refused, with which codes and
           warnings, on lint's engine. JUnit for CI (--junit FILE).
  check    Check an installation: CRDs, the webhook and its certificate,
           the admission policy, and the manager's leader.
  deadletters
           List, export (JSON lines) and reconcile the dead letters of a
           journal file or of the forwarder's Kafka topic, for example the
           UNKNOWN_OUTCOME ones (docs/deadletter-journal.md).
  version  The plugin's version and the versions it speaks.

lint, test, graph, explain, check, deadletters and version take -o json or -o yaml, which print
one versioned object (apiVersion retryguard.io/v1alpha1) for scripts.`

const rootExamples = `  # Where do 27 calls per operation come from, across the teams' namespaces?
  kubectl retryguard graph -n payments
  kubectl retryguard graph -A -o dot | dot -Tsvg > layers.svg

  # Why is this policy not Ready, and how long can it take in the worst case?
  kubectl retryguard explain rp/sms-2fa-dispatch -n auth

  # Pre-merge check of the policies kept in Git
  kubectl retryguard lint -f deploy/retryguard/
  kustomize build overlays/prod | kubectl retryguard lint -f - -o json | jq '.summary'
  kubectl retryguard test deploy/retryguard/ --junit policy-tests.xml

  # Is the installation healthy?
  kubectl retryguard check`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	default: // cobra's own: an unknown command or flag, a wrong argument count
		fmt.Fprintf(stderr, "Error: %v\nRun \"kubectl retryguard --help\" for usage.\n", err)
		return exitUsage
	}
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-retryguard",
		Short:         "See and check Retryguard retry policies",
		Long:          rootLong,
		Example:       rootExamples,
		SilenceErrors: true,
		SilenceUsage:  true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl retryguard"},
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			_ = cmd.Usage()
			return exitWith(exitUsage)
		},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// A flag error is a usage error: exit 2, as before the commands moved to cobra.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return exitf(exitUsage, "%s: %v\nRun \"%s --help\" for usage.", cmd.Name(), err, cmd.CommandPath())
	})
	root.AddCommand(newLintCommand(), newGraphCommand(), newExplainCommand(), newCheckCommand(),
		newTestCommand(), newDeadlettersCommand(), newVersionCommand())
	return root
}

// stdinOf is the command's standard input.
func stdinOf(cmd *cobra.Command) io.Reader { return cmd.InOrStdin() }

// clusterFlags are kubectl's own connection flags (--kubeconfig, --context,
// -n, --as, --as-group, --as-uid, --server, --token, ...), from cli-runtime.
func clusterFlags(cmd *cobra.Command) *genericclioptions.ConfigFlags {
	cf := genericclioptions.NewConfigFlags(true)
	cf.AddFlags(cmd.Flags())
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completeNamespaces(cmd.Context(), cf, toComplete), cobra.ShellCompDirectiveNoFileComp
	})
	return cf
}

// limitsFlags registers the platform limits with the manager's own flag
// names and defaults (options.BindPlatformLimits).
func limitsFlags(cmd *cobra.Command) *policygraph.Limits {
	limits := policygraph.DefaultLimits()
	goflags := flag.NewFlagSet(cmd.Name(), flag.ContinueOnError)
	options.BindPlatformLimits(goflags, &limits)
	cmd.Flags().AddGoFlagSet(goflags)
	return &limits
}

// outputFlag registers -o with the command's own formats and the
// machine-readable ones, and completes them.
func outputFlag(cmd *cobra.Command, human ...string) *string {
	formats := append(human, output.Formats...)
	o := cmd.Flags().StringP("output", "o", formats[0], "Output format: "+strings.Join(formats, ", ")+
		". json and yaml print one "+output.APIVersion+" object (docs/kubectl-plugin.md#machine-readable-output).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
	return o
}

// checkOutput refuses a format the command does not print.
func checkOutput(cmd *cobra.Command, format string, human ...string) error {
	for _, f := range append(human, output.Formats...) {
		if f == format {
			return nil
		}
	}
	return exitf(exitUsage, "%s: --output must be one of %s, not %q", cmd.Name(), strings.Join(append(human, output.Formats...), ", "), format)
}

// writeOutput prints v as format, or fails with exitFailed.
func writeOutput(cmd *cobra.Command, format string, v any) error {
	if err := output.Write(cmd.OutOrStdout(), format, v); err != nil {
		return exitf(exitFailed, "%s: writing the output: %v", cmd.Name(), err)
	}
	return nil
}

func newVersionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The plugin's module version, and the API and payload versions it speaks",
		Args:  cobra.NoArgs,
	}
	format := outputFlag(cmd, "text")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(cmd, *format, "text"); err != nil {
			return err
		}
		v := versionInfo(debug.ReadBuildInfo)
		if output.IsMachine(*format) {
			return writeOutput(cmd, *format, v)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "kubectl-retryguard %s (%s)\n  RetryPolicy and RetryBudget API: %s\n  policy payload: %s\n",
			v.Module, v.GoVersion, v.PolicyAPIVersion, v.PayloadVersion)
		return nil
	}
	return cmd
}

// releaseVersion is the version hack/release -dist stamps into the archives
// it builds (-ldflags -X): a build from a checkout has no module version.
var releaseVersion string

// versionInfo reads the module version from the binary's build information:
// the tag that `go install ...@vX.Y.Z` built, else the release version
// hack/release stamped, else "(devel)" for a build from a checkout.
func versionInfo(read func() (*debug.BuildInfo, bool)) output.Version {
	v := output.Version{TypeMeta: output.Meta(output.KindVersion), Module: "unknown", GoVersion: "unknown",
		PolicyAPIVersion: v1.GroupVersion.String(), PayloadVersion: policyconfig.SchemaVersion}
	if bi, ok := read(); ok {
		v.GoVersion = bi.GoVersion
		if bi.Main.Version != "" {
			v.Module = bi.Main.Version
		}
	}
	if releaseVersion != "" && (v.Module == "(devel)" || v.Module == "unknown") {
		v.Module = releaseVersion
	}
	return v
}
