// Package graph builds the layer forest of RetryPolicies (parentRef chains)
// with each path's attempt product, and renders it as text or Graphviz dot.
//
// The product along a path is policygraph's Chain, the webhook's own
// arithmetic, and a link across namespaces counts only where the parent
// consents (policygraph.ChildPermitted), as in admission: a child its
// parent does not allow is shown under it but starts its own product.
package graph

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Key names an object across namespaces.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

func keyOf(o metav1.Object) Key { return Key{o.GetNamespace(), o.GetName()} }

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// ParentOf returns the key of the policy p's parentRef names, and whether it
// names one: in parentRef.namespace, p's own namespace by default.
func ParentOf(p *v1.RetryPolicy) (Key, bool) {
	k, ok := policygraph.ParentKey(p)
	return Key{Namespace: k.Namespace, Name: k.Name}, ok
}

// Namespaces holds the labels of the namespaces a graph knows, for the
// consent of Selector parents; nil when they could not be read.
type Namespaces map[string]map[string]string

// permitted says whether parent counts child, and why not. Where the
// child's namespace labels are unknown and the parent consents by Selector,
// the controller's verdict on the child (Ready reason ParentNotPermitted)
// decides.
func permitted(parent, child *v1.RetryPolicy, namespaces Namespaces) *policygraph.Refusal {
	refusal := &policygraph.Refusal{Parent: types.NamespacedName{Namespace: parent.Namespace, Name: parent.Name},
		From: policygraph.FromOf(parent)}
	nsLabels, known := namespaces[child.Namespace]
	if policygraph.FromOf(parent) == v1.NamespacesFromSelector && child.Namespace != parent.Namespace && !known {
		if ReadyOf(child.Status.Conditions, child.Generation).Reason == v1.ReasonParentNotPermitted {
			return refusal
		}
		return nil
	}
	if policygraph.ChildPermitted(parent, child.Namespace, nsLabels) {
		return nil
	}
	return refusal
}

// HiddenAttempts is how many attempts a layer Retryguard cannot see (an
// SDK's or a proxy's own retries) makes for each attempt of p: its
// layer.hiddenAttempts, as the webhook reads it.
func HiddenAttempts(p *v1.RetryPolicy) int32 { return policygraph.LayerOf(p).Hidden }

// Ready is a Ready condition as the controller reported it.
type Ready struct {
	// Status is True, False or Unknown; Unknown also when no condition is set.
	Status metav1.ConditionStatus
	// Reason and Message are the condition's; empty when it is absent.
	Reason, Message string
	// Reported is false when the controller has set no Ready condition.
	Reported bool
	// Stale is set when the condition describes an older generation.
	Stale bool
}

// ReadyOf reads an object's Ready condition.
func ReadyOf(conditions []metav1.Condition, generation int64) Ready {
	c := meta.FindStatusCondition(conditions, v1.ConditionReady)
	if c == nil {
		return Ready{Status: metav1.ConditionUnknown}
	}
	return Ready{Status: c.Status, Reason: c.Reason, Message: c.Message, Reported: true,
		Stale: c.ObservedGeneration != 0 && c.ObservedGeneration < generation}
}

// Node is one policy in the forest.
type Node struct {
	Key
	Policy   *v1.RetryPolicy
	Parent   *Node
	Children []*Node
	// MissingParent is the parent a parentRef names but the forest lacks.
	MissingParent *Key
	// NotPermitted is set when Parent, in another namespace, does not
	// allow n's namespace: n is not counted in Parent's product and makes
	// a single attempt.
	NotPermitted *policygraph.Refusal
}

// Chain is the path from the root down to n, hidden layers included. It
// stops at a parent that does not consent to its child.
func (n *Node) Chain() policygraph.Chain {
	var c policygraph.Chain
	for cur := n; cur != nil; cur = cur.Parent {
		c = append(policygraph.Chain{policygraph.LayerOf(cur.Policy)}, c...)
		if cur.NotPermitted != nil {
			break
		}
	}
	return c
}

// Budget is one RetryBudget and the policies that draw on it.
type Budget struct {
	Key
	// Budget is nil when policies name a budget that does not exist.
	Budget *v1.RetryBudget
	Users  []Key
}

// Forest is the layer forest of a set of policies. Build it with Build.
type Forest struct {
	// Roots are the policies with no parent in the forest, by key.
	Roots []*Node
	// Nodes holds every policy.
	Nodes map[Key]*Node
	// Cycles lists the parentRef cycles, each in call order, the first
	// policy repeated at the end. Their policies are under no root.
	Cycles [][]Key
	// Budgets lists the budgets and the budgets named but absent, by key.
	Budgets []*Budget
}

// Build links policies by parentRef, knowing no namespace labels. The
// inputs are not modified.
func Build(policies []v1.RetryPolicy, budgets []v1.RetryBudget) *Forest {
	return BuildIn(policies, budgets, nil)
}

// BuildIn links policies by parentRef, with the labels of the namespaces
// for the consent of Selector parents. The inputs are not modified.
func BuildIn(policies []v1.RetryPolicy, budgets []v1.RetryBudget, namespaces Namespaces) *Forest {
	f := &Forest{Nodes: make(map[Key]*Node, len(policies))}
	for i := range policies {
		p := &policies[i]
		f.Nodes[keyOf(p)] = &Node{Key: keyOf(p), Policy: p}
	}
	keys := make([]Key, 0, len(f.Nodes))
	for k := range f.Nodes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	for _, k := range keys {
		n := f.Nodes[k]
		pk, ok := ParentOf(n.Policy)
		if !ok {
			continue
		}
		if parent := f.Nodes[pk]; parent != nil {
			n.Parent = parent
			n.NotPermitted = permitted(parent.Policy, n.Policy, namespaces)
			parent.Children = append(parent.Children, n)
		} else {
			n.MissingParent = &pk
		}
	}
	for _, k := range keys {
		if n := f.Nodes[k]; n.Parent == nil {
			f.Roots = append(f.Roots, n)
		}
	}
	f.Cycles = findCycles(f, keys)
	f.Budgets = budgetsOf(f, keys, budgets)
	return f
}

// findCycles reports the loops of nodes that never reach a root. Each
// node has one parent, so walking up from any node either ends at a root
// or enters exactly one loop.
func findCycles(f *Forest, keys []Key) [][]Key {
	reached := map[*Node]bool{}
	var mark func(*Node)
	mark = func(n *Node) {
		reached[n] = true
		for _, c := range n.Children {
			mark(c)
		}
	}
	for _, r := range f.Roots {
		mark(r)
	}
	var cycles [][]Key
	for _, k := range keys {
		n := f.Nodes[k]
		if reached[n] {
			continue
		}
		seen := map[*Node]bool{}
		for !seen[n] {
			seen[n] = true
			n = n.Parent
		}
		// n is on the loop; collect it upwards, then reverse into call order.
		loop := []Key{n.Key}
		for cur := n.Parent; cur != n; cur = cur.Parent {
			loop = append(loop, cur.Key)
		}
		slices.Reverse(loop)
		// Start at the smallest key so each loop is reported once.
		start := slices.IndexFunc(loop, func(k Key) bool { return k == slices.MinFunc(loop, compareKeys) })
		loop = append(loop[start:], loop[:start]...)
		loop = append(loop, loop[0])
		for _, member := range loop[:len(loop)-1] {
			reached[f.Nodes[member]] = true
		}
		for _, member := range loop[:len(loop)-1] {
			for _, c := range f.Nodes[member].Children {
				if !reached[c] {
					mark(c) // the branches hanging under the loop
				}
			}
		}
		cycles = append(cycles, loop)
	}
	return cycles
}

func budgetsOf(f *Forest, keys []Key, budgets []v1.RetryBudget) []*Budget {
	byKey := map[Key]*Budget{}
	for i := range budgets {
		b := &budgets[i]
		byKey[keyOf(b)] = &Budget{Key: keyOf(b), Budget: b}
	}
	for _, k := range keys {
		p := f.Nodes[k].Policy
		ref, ok := policygraph.BudgetKeyOf(p)
		if !ok {
			continue
		}
		bk := Key{ref.Namespace, ref.Name}
		if byKey[bk] == nil {
			byKey[bk] = &Budget{Key: bk}
		}
		byKey[bk].Users = append(byKey[bk].Users, k)
	}
	out := make([]*Budget, 0, len(byKey))
	for _, b := range byKey {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *Budget) int { return compareKeys(a.Key, b.Key) })
	return out
}

func slicesSortKeys(keys []Key) { slices.SortFunc(keys, compareKeys) }

// Touching keeps the trees, cycles and budgets that involve namespace ns:
// a tree stays whole when any of its policies is in ns, so that a chain
// across namespaces is seen from each of them.
func (f *Forest) Touching(ns string) {
	var touches func(*Node) bool
	touches = func(n *Node) bool {
		return n.Namespace == ns || slices.ContainsFunc(n.Children, touches)
	}
	f.Roots = slices.DeleteFunc(f.Roots, func(r *Node) bool { return !touches(r) })
	f.Cycles = slices.DeleteFunc(f.Cycles, func(c []Key) bool {
		return !slices.ContainsFunc(c, func(k Key) bool { return touches(f.Nodes[k]) })
	})
	f.Budgets = slices.DeleteFunc(f.Budgets, func(b *Budget) bool { return b.Namespace != ns })
}
