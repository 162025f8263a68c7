package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/explain"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/graph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
)

// connect is how the cluster commands reach a cluster; tests replace it.
var connect = kube.Connect

// Output formats of graph, besides json and yaml (and outputText).
const outputDot = "dot"

func newGraphCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "graph [-n NAMESPACE | -A] [-o text|dot|json|yaml]",
		Short: "The layer forest with each path's attempt product",
		Long: `The layer forest (parentRef chains, across namespaces) with each path's attempt
product, the hidden layers, the budgets and the Ready state of every policy. -n
shows every tree that touches the namespace.`,
		Example: `  kubectl retryguard graph -n checkout
  kubectl retryguard graph -A -o dot | dot -Tsvg > layers.svg
  kubectl retryguard graph -A -o json | jq '.policies[] | select(.overLimit)'`,
		Args: cobra.NoArgs,
	}
	cf := clusterFlags(cmd)
	var all bool
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Show every namespace.")
	format := outputFlag(cmd, outputText, outputDot)
	limits := limitsFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(cmd, *format, outputText, outputDot); err != nil {
			return err
		}
		if all && *cf.Namespace != "" {
			return exitf(exitUsage, "graph: takes no arguments, and -n and -A exclude each other")
		}
		c, ns, err := connect(cf)
		if err != nil {
			return exitf(exitUnreadable, "graph: %v", err)
		}
		view, err := gather(cmd.Context(), c, ns, all)
		if err != nil {
			return exitf(exitUnreadable, "graph: %v", err)
		}
		forest := graph.BuildIn(view.policies, view.budgets, view.namespaces)
		if !all {
			forest.Touching(ns)
		}
		o := graph.Options{MaxLeafAttempts: limits.MaxLeafAttempts}
		switch *format {
		case outputDot:
			forest.WriteDot(cmd.OutOrStdout(), o)
		case outputText:
			forest.WriteText(cmd.OutOrStdout(), o)
		default:
			return writeOutput(cmd, *format, layerGraph(forest, o))
		}
		return nil
	}
	return cmd
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

func newExplainCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain rp/NAME [-n NAMESPACE]",
		Short: "Why one RetryPolicy is or is not in force",
		Long: `Why one RetryPolicy is or is not in force: its conditions, its product path, its
worst-case schedule and its budget share.`,
		Example: `  kubectl retryguard explain rp/sms-2fa-dispatch -n auth
  kubectl retryguard explain connector --max-leaf-attempts 9
  kubectl retryguard explain rp/sms-2fa-dispatch -n auth -o json | jq '.schedule.feasibleAttempts'`,
	}
	cf := clusterFlags(cmd)
	format := outputFlag(cmd, outputText)
	limits := limitsFlags(cmd)
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completePolicies(cmd.Context(), cf, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(cmd, *format, outputText); err != nil {
			return err
		}
		if len(args) != 1 {
			_ = cmd.Usage()
			return exitf(exitUsage, "explain: name exactly one policy, as rp/NAME")
		}
		name, err := policyArg(args[0])
		if err != nil {
			return exitf(exitUsage, "explain: %v", err)
		}
		c, ns, err := connect(cf)
		if err != nil {
			return exitf(exitUnreadable, "explain: %v", err)
		}
		ctx := cmd.Context()
		var p v1.RetryPolicy
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			if apierrors.IsNotFound(err) {
				return exitf(exitUnreadable, "explain: RetryPolicy %s/%s not found", ns, name)
			}
			return exitf(exitUnreadable, "explain: %v", err)
		}
		view, err := gather(ctx, c, ns, false)
		if err != nil {
			return exitf(exitUnreadable, "explain: %v", err)
		}
		in := explain.Input{Policy: &p, Policies: view.policies, Budgets: view.budgets, Namespaces: view.namespaces, Limits: *limits}
		if output.IsMachine(*format) {
			e, err := explanation(ctx, in)
			if err != nil {
				return exitf(exitFailed, "explain: %v", err)
			}
			return writeOutput(cmd, *format, e)
		}
		if err := explain.Write(ctx, cmd.OutOrStdout(), in); err != nil {
			return exitf(exitFailed, "explain: %v", err)
		}
		return nil
	}
	return cmd
}
