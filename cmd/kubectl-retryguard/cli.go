package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/lint"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
	"github.com/retryguard/retryguard/internal/options"
)

// Exit codes. Lint's are its contract with CI: 1 means the API server would
// refuse something.
const (
	exitOK      = 0
	exitRefused = 1
	exitFailure = 1
	exitUsage   = 2
)

const usage = `kubectl retryguard: see and check Retryguard retry policies.

Usage:
  kubectl retryguard graph   [-n NAMESPACE | -A] [-o text|dot]
  kubectl retryguard explain rp/NAME [-n NAMESPACE]
  kubectl retryguard lint    -f PATH [-f PATH ...]
  kubectl retryguard deadletters list|export|reconcile (-f JOURNAL | --brokers HOST:PORT --topic TOPIC)

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
  deadletters
           List, export (JSON lines) and reconcile the dead letters of a
           journal file or of the forwarder's Kafka topic, for example the
           UNKNOWN_OUTCOME ones (docs/deadletter-journal.md).

Examples:
  # Where do 27 calls per operation come from, across the teams' namespaces?
  kubectl retryguard graph -n payments
  kubectl retryguard graph -A -o dot | dot -Tsvg > layers.svg

  # Why is this policy not Ready, and how long can it take in the worst case?
  kubectl retryguard explain rp/sms-2fa-dispatch -n auth

  # Pre-merge check of the policies kept in Git
  kubectl retryguard lint -f deploy/retryguard/
  kustomize build overlays/prod | kubectl retryguard lint -f -

Run "kubectl retryguard COMMAND -h" for a command's flags.
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "lint":
		return runLint(ctx, rest, stdin, stdout, stderr)
	case "graph":
		return runGraph(ctx, rest, stdout, stderr)
	case "explain":
		return runExplain(ctx, rest, stdout, stderr)
	case "deadletters":
		return runDeadletters(ctx, rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// newFlagSet returns a flag set whose -h prints the command's usage and examples.
func newFlagSet(name, synopsis, examples string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: kubectl retryguard %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExamples:\n%s", examples)
	}
	return fs
}

// parse parses flags, returning the exit code to stop with, if any.
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true
	}
	return 0, false
}

// bindCluster registers the kubeconfig flags.
func bindCluster(fs *flag.FlagSet, f *kube.ConfigFlags) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")
	fs.StringVar(&f.Context, "context", "", "The kubeconfig context to use.")
	fs.StringVar(&f.Namespace, "namespace", "", "The namespace (default: the context's).")
	fs.StringVar(&f.Namespace, "n", "", "Shorthand for --namespace.")
}

// bindLimits registers the platform limits with the manager's own flag
// names and defaults.
func bindLimits(fs *flag.FlagSet, limits *policygraph.Limits) {
	options.BindPlatformLimits(fs, limits)
}

func runLint(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("lint", "lint -f PATH [-f PATH ...] [flags]", `  kubectl retryguard lint -f policies/
  kubectl retryguard lint -f budget.yaml -f policies.yaml --max-leaf-attempts 9
  kustomize build overlays/prod | kubectl retryguard lint -f -
`, stderr)
	var paths stringList
	opts := lint.DefaultOptions()
	var verbose bool
	fs.Var(&paths, "f", "A file, a directory (walked for .yaml, .yml and .json) or - for standard input; repeatable. Documents are admitted in order.")
	fs.Var(&paths, "filename", "Same as -f.")
	fs.StringVar(&opts.Namespace, "namespace", lint.DefaultNamespace, "The namespace of objects that set none.")
	fs.StringVar(&opts.Namespace, "n", lint.DefaultNamespace, "Shorthand for --namespace.")
	fs.BoolVar(&verbose, "v", false, "Also list the documents that are not Retryguard objects.")
	bindLimits(fs, &opts.Limits)
	if code, stop := parse(fs, args); stop {
		return code
	}
	if len(paths) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "lint: give the manifests with -f PATH (and nothing else)")
		fs.Usage()
		return exitUsage
	}
	docs, err := manifest.Load(paths, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "lint: %v\n", err)
		return exitFailure
	}
	results, err := lint.Run(ctx, docs, opts)
	if err != nil {
		fmt.Fprintf(stderr, "lint: %v\n", err)
		return exitFailure
	}
	lint.Report(stdout, results, verbose)
	if lint.AnyRefused(results) {
		return exitRefused
	}
	return exitOK
}
