package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/explain"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/graph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
)

// connect is how the cluster commands reach a cluster; tests replace it.
var connect = kube.Connect

// Output formats of graph.
const (
	outputText = "text"
	outputDot  = "dot"
)

func runGraph(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("graph", "graph [-n NAMESPACE | -A] [-o text|dot] [flags]", `  kubectl retryguard graph -n checkout
  kubectl retryguard graph -A -o dot | dot -Tsvg > layers.svg
`, stderr)
	var cf kube.ConfigFlags
	var all bool
	output := outputText
	limits := policygraph.DefaultLimits()
	bindCluster(fs, &cf)
	fs.BoolVar(&all, "all-namespaces", false, "Show every namespace.")
	fs.BoolVar(&all, "A", false, "Shorthand for --all-namespaces.")
	fs.StringVar(&output, "output", outputText, "Output format: text or dot (Graphviz).")
	fs.StringVar(&output, "o", outputText, "Shorthand for --output.")
	bindLimits(fs, &limits)
	if code, stop := parse(fs, args); stop {
		return code
	}
	if output != outputText && output != outputDot {
		fmt.Fprintf(stderr, "graph: --output must be text or dot, not %q\n", output)
		return exitUsage
	}
	if fs.NArg() > 0 || (all && cf.Namespace != "") {
		fmt.Fprintln(stderr, "graph: takes no arguments, and -n and -A exclude each other")
		return exitUsage
	}
	c, ns, err := connect(cf)
	if err != nil {
		fmt.Fprintf(stderr, "graph: %v\n", err)
		return exitFailure
	}
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(ns))
	}
	policies, budgets, err := list(ctx, c, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "graph: %v\n", err)
		return exitFailure
	}
	forest := graph.Build(policies, budgets)
	o := graph.Options{MaxLeafAttempts: limits.MaxLeafAttempts}
	if output == outputDot {
		forest.WriteDot(stdout, o)
	} else {
		forest.WriteText(stdout, o)
	}
	return exitOK
}

func list(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]v1.RetryPolicy, []v1.RetryBudget, error) {
	var policies v1.RetryPolicyList
	if err := c.List(ctx, &policies, opts...); err != nil {
		return nil, nil, fmt.Errorf("listing RetryPolicies: %w", err)
	}
	var budgets v1.RetryBudgetList
	if err := c.List(ctx, &budgets, opts...); err != nil {
		return nil, nil, fmt.Errorf("listing RetryBudgets: %w", err)
	}
	return policies.Items, budgets.Items, nil
}

// policyArg reads "rp/NAME", "retrypolicy/NAME", "retrypolicies/NAME" or a bare NAME.
func policyArg(arg string) (string, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return arg, nil
	}
	switch strings.ToLower(kind) {
	case "rp", "retrypolicy", "retrypolicies", "retrypolicies.policy.retryguard.io", "retrypolicy.policy.retryguard.io":
	default:
		return "", fmt.Errorf("explain takes a RetryPolicy (rp/NAME), not %q", kind)
	}
	if name == "" {
		return "", fmt.Errorf("missing the policy name in %q", arg)
	}
	return name, nil
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("explain", "explain rp/NAME [-n NAMESPACE] [flags]", `  kubectl retryguard explain rp/sms-2fa-dispatch -n auth
  kubectl retryguard explain connector --max-leaf-attempts 9
`, stderr)
	var cf kube.ConfigFlags
	limits := policygraph.DefaultLimits()
	bindCluster(fs, &cf)
	bindLimits(fs, &limits)
	// Accept the policy before or after the flags, as kubectl does.
	var positional []string
	for len(args) > 0 {
		if code, stop := parse(fs, args); stop {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintln(stderr, "explain: name exactly one policy, as rp/NAME")
		fs.Usage()
		return exitUsage
	}
	name, err := policyArg(positional[0])
	if err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return exitUsage
	}
	c, ns, err := connect(cf)
	if err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return exitFailure
	}
	var p v1.RetryPolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(stderr, "explain: RetryPolicy %s/%s not found\n", ns, name)
		} else {
			fmt.Fprintf(stderr, "explain: %v\n", err)
		}
		return exitFailure
	}
	policies, budgets, err := list(ctx, c, client.InNamespace(ns))
	if err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return exitFailure
	}
	in := explain.Input{Policy: &p, Policies: policies, Budgets: budgets, Limits: limits}
	if err := explain.Write(ctx, stdout, in); err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return exitFailure
	}
	return exitOK
}
