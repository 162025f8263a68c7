package main

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/explain"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/graph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
)

// explanation is explain's -o json|yaml object.
var explanation = explain.Explain

// layerGraph is graph's -o json|yaml object: the policies of every tree in
// the order the text shows them (each root, then its children depth
// first), then the policies of the cycles, and the budgets.
func layerGraph(f *graph.Forest, o graph.Options) output.LayerGraph {
	g := output.LayerGraph{TypeMeta: output.Meta(output.KindLayerGraph), MaxLeafAttempts: o.MaxLeafAttempts,
		Policies: []output.GraphPolicy{}, Budgets: []output.GraphBudget{}}
	seen := map[graph.Key]bool{}
	var walk func(n *graph.Node)
	walk = func(n *graph.Node) {
		if seen[n.Key] {
			return
		}
		seen[n.Key] = true
		g.Policies = append(g.Policies, graphPolicy(n, o))
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range f.Roots {
		walk(r)
	}
	for _, c := range f.Cycles {
		keys := make([]string, len(c))
		for i, k := range c {
			keys[i] = k.String()
			walk(f.Nodes[k])
		}
		g.Cycles = append(g.Cycles, keys)
	}
	for _, b := range f.Budgets {
		gb := output.GraphBudget{Namespace: b.Namespace, Name: b.Name, Exists: b.Budget != nil, UsedBy: []string{}}
		for _, u := range b.Users {
			gb.UsedBy = append(gb.UsedBy, u.String())
		}
		if b.Budget != nil {
			r := graph.ReadyOf(b.Budget.Status.Conditions, b.Budget.Generation)
			gb.Ready = &output.Condition{Status: string(r.Status), Reason: r.Reason, Message: r.Message, Reported: r.Reported, Stale: r.Stale}
		}
		g.Budgets = append(g.Budgets, gb)
	}
	return g
}

func graphPolicy(n *graph.Node, o graph.Options) output.GraphPolicy {
	p := n.Policy
	chain := n.Chain()
	r := graph.ReadyOf(p.Status.Conditions, p.Generation)
	gp := output.GraphPolicy{Namespace: n.Namespace, Name: n.Name, Layer: p.Spec.Layer.Name, MaxAttempts: p.Spec.MaxAttempts,
		Product: chain.Product(), Path: chain.String(), OverLimit: chain.Product() > o.MaxLeafAttempts,
		Ready: output.Condition{Status: string(r.Status), Reason: r.Reason, Message: r.Message, Reported: r.Reported, Stale: r.Stale}}
	if h := graph.HiddenAttempts(p); h > 1 {
		gp.HiddenAttempts = h
	}
	if n.Parent != nil {
		gp.Parent = n.Parent.Key.String()
	}
	if n.MissingParent != nil {
		gp.MissingParent = n.MissingParent.String()
	}
	if n.NotPermitted != nil {
		gp.NotPermitted = policygraph.NotPermittedMessage(*n.NotPermitted, p.Namespace)
	}
	if key, ok := policygraph.BudgetKeyOf(p); ok {
		gp.Budget = key.String()
	}
	return gp
}

// completeNamespaces lists the namespaces for -n completion, or nothing
// when the cluster cannot be read.
func completeNamespaces(ctx context.Context, cf *genericclioptions.ConfigFlags, prefix string) []string {
	c, _, err := connect(cf)
	if err != nil {
		return nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := c.List(ctx, list); err != nil {
		return nil
	}
	var out []string
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) {
			out = append(out, n.Name)
		}
	}
	return out
}

// completePolicies lists the RetryPolicies of the namespace, as rp/NAME,
// for explain's argument.
func completePolicies(ctx context.Context, cf *genericclioptions.ConfigFlags, prefix string) []string {
	c, ns, err := connect(cf)
	if err != nil {
		return nil
	}
	var list v1.RetryPolicyList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []string
	for _, p := range list.Items {
		for _, name := range []string{"rp/" + p.Name, p.Name} {
			if strings.HasPrefix(name, prefix) {
				out = append(out, name)
				break
			}
		}
	}
	return out
}
