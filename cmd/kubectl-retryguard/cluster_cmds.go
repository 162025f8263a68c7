package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	view, err := gather(ctx, c, ns, all)
	if err != nil {
		fmt.Fprintf(stderr, "graph: %v\n", err)
		return exitFailure
	}
	forest := graph.BuildIn(view.policies, view.budgets, view.namespaces)
	if !all {
		forest.Touching(ns)
	}
	o := graph.Options{MaxLeafAttempts: limits.MaxLeafAttempts}
	if output == outputDot {
		forest.WriteDot(stdout, o)
	} else {
		forest.WriteText(stdout, o)
	}
	return exitOK
}

// clusterView is what graph and explain read from a cluster.
type clusterView struct {
	policies   []v1.RetryPolicy
	budgets    []v1.RetryBudget
	namespaces graph.Namespaces
}

// gather reads the policies and budgets of namespace ns (every namespace
// with all) and the policies their chains cross into: every policy, when
// the user may list them in all namespaces, else the parents followed up
// from ns one by one. Namespace labels, for the consent of Selector
// parents, are read when the user may list namespaces; else they are
// unknown and the controller's verdict stands.
func gather(ctx context.Context, c client.Reader, ns string, all bool) (clusterView, error) {
	var v clusterView
	var policies v1.RetryPolicyList
	err := c.List(ctx, &policies)
	if apierrors.IsForbidden(err) && !all {
		err = c.List(ctx, &policies, client.InNamespace(ns))
		if err == nil {
			policies.Items, err = withParents(ctx, c, policies.Items)
		}
	}
	if err != nil {
		return v, fmt.Errorf("listing RetryPolicies: %w", err)
	}
	var budgets v1.RetryBudgetList
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, &budgets, opts...); err != nil {
		return v, fmt.Errorf("listing RetryBudgets: %w", err)
	}
	v.policies, v.budgets = policies.Items, budgets.Items
	namespaces := &metav1.PartialObjectMetadataList{}
	namespaces.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := c.List(ctx, namespaces); err == nil {
		v.namespaces = graph.Namespaces{}
		for _, n := range namespaces.Items {
			v.namespaces[n.Name] = n.Labels
		}
	}
	return v, nil
}

// withParents adds to policies the parents their chains name in other
// namespaces, up to policygraph.MaxDepth links; a parent that cannot be
// read is left out, and shows as not found.
func withParents(ctx context.Context, c client.Reader, policies []v1.RetryPolicy) ([]v1.RetryPolicy, error) {
	have := map[graph.Key]bool{}
	for i := range policies {
		have[graph.Key{Namespace: policies[i].Namespace, Name: policies[i].Name}] = true
	}
	frontier := policies
	for depth := 0; depth < policygraph.MaxDepth && len(frontier) > 0; depth++ {
		var next []v1.RetryPolicy
		for i := range frontier {
			k, ok := graph.ParentOf(&frontier[i])
			if !ok || have[k] {
				continue
			}
			have[k] = true
			var parent v1.RetryPolicy
			switch err := c.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, &parent); {
			case err == nil:
				next = append(next, parent)
			case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
				return nil, err
			}
		}
		policies = append(policies, next...)
		frontier = next
	}
	return policies, nil
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
	view, err := gather(ctx, c, ns, false)
	if err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return exitFailure
	}
	in := explain.Input{Policy: &p, Policies: view.policies, Budgets: view.budgets, Namespaces: view.namespaces, Limits: limits}
	if err := explain.Write(ctx, stdout, in); err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return exitFailure
	}
	return exitOK
}
