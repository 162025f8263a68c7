package graph

import (
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Options select what a rendering shows.
type Options struct {
	// MaxLeafAttempts is the platform's limit; paths above it are flagged.
	MaxLeafAttempts int64
}

func (f *Forest) label(n *Node, home string) string {
	if n.Namespace != home {
		return n.Key.String()
	}
	return n.Name
}

func readyText(r Ready) string {
	switch {
	case !r.Reported:
		return "Ready=Unknown (not reconciled yet)"
	case r.Reason == "":
		return "Ready=" + string(r.Status)
	default:
		s := fmt.Sprintf("Ready=%s (%s)", r.Status, r.Reason)
		if r.Stale {
			s += " stale"
		}
		return s
	}
}

// WriteText renders the forest as indented trees, one per root, grouped by
// the root's namespace, then the cycles and the budgets. Each policy shows
// its layer, attempts, product and Ready state; each leaf, and each policy
// over the limit, shows the whole path that makes its product.
func (f *Forest) WriteText(w io.Writer, o Options) {
	if len(f.Nodes) == 0 {
		fmt.Fprintln(w, "No RetryPolicies found.")
	}
	home := ""
	for _, r := range f.Roots {
		if r.Namespace != home {
			home = r.Namespace
			fmt.Fprintf(w, "Namespace %s\n", home)
		}
		f.writeNode(w, o, r, home, "  ", "  ")
	}
	for _, c := range f.Cycles {
		parts := make([]string, len(c))
		for i, k := range c {
			parts[i] = k.String()
		}
		fmt.Fprintf(w, "parentRef cycle (no top-level caller; refused by admission): %s\n", strings.Join(parts, " → "))
	}
	if len(f.Budgets) > 0 {
		fmt.Fprintln(w, "Budgets")
	}
	for _, b := range f.Budgets {
		users := make([]string, len(b.Users))
		for i, u := range b.Users {
			users[i] = f.label(f.Nodes[u], b.Namespace)
		}
		if b.Budget == nil {
			fmt.Fprintf(w, "  %s: MISSING, named by %s\n", b.Key, strings.Join(users, ", "))
			continue
		}
		s := b.Budget.Spec.WithDefaults()
		fleet := ""
		if m := s.MaxRetriesPerSecond; m != nil {
			fleet += fmt.Sprintf(", at most %d retries/s in all", *m)
		}
		if s.Consumers != nil {
			counted := "not counted yet"
			if c := b.Budget.Status.Consumers; c != nil {
				counted = fmt.Sprintf("%d counted", *c)
			}
			fleet += fmt.Sprintf(", shared by pods %s (%s)", metav1.FormatLabelSelector(s.Consumers.PodSelector), counted)
		}
		fmt.Fprintf(w, "  %s: %d%% of primaries over %s, maxTokens %d, partitions %d%s, %s; used by %s\n",
			b.Key, s.RetryPercent, s.Window.Duration(), *s.MaxTokens, *s.Partitions, fleet,
			readyText(ReadyOf(b.Budget.Status.Conditions, b.Budget.Generation)), orNone(users))
	}
}

// fromText reads an allowedChildren.namespaces.from.
func fromText(from v1.FromNamespaces) string {
	switch from {
	case v1.NamespacesFromSelector:
		return "namespaces matching its selector"
	default:
		return "its own namespace"
	}
}

// hiddenText lists status.hiddenLayers: the layers the controller found
// retrying unseen by the runtime, each with its attempts.
func hiddenText(p *v1.RetryPolicy) string {
	parts := make([]string, len(p.Status.HiddenLayers))
	for i, h := range p.Status.HiddenLayers {
		parts[i] = fmt.Sprintf("%s ×%d", h.Source, h.Attempts)
	}
	return strings.Join(parts, ", ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no policy"
	}
	return strings.Join(s, ", ")
}

func (f *Forest) writeNode(w io.Writer, o Options, n *Node, home, lead, indent string) {
	chain := n.Chain()
	product := chain.Product()
	over := o.MaxLeafAttempts > 0 && product > o.MaxLeafAttempts
	p := n.Policy
	line := fmt.Sprintf("%s%s  layer %s ×%d", lead, f.label(n, home), p.Spec.Layer.Name, p.Spec.MaxAttempts)
	if h := HiddenAttempts(p); h > 1 {
		line += fmt.Sprintf(" ×%d hidden", h)
	}
	line += fmt.Sprintf("  product %d", product)
	if over {
		line += fmt.Sprintf(" > %d", o.MaxLeafAttempts)
	}
	if key, ok := policygraph.BudgetKeyOf(p); ok {
		if key.Namespace == p.Namespace {
			line += "  budget " + key.Name
		} else {
			line += "  budget " + key.String()
		}
	}
	line += "  " + readyText(ReadyOf(p.Status.Conditions, p.Generation))
	if n.MissingParent != nil {
		line += fmt.Sprintf("  (parent %s not found)", n.MissingParent)
	}
	if r := n.NotPermitted; r != nil {
		line += fmt.Sprintf("  (not permitted: %s allows children from %s only; not counted, a single attempt)",
			r.Parent, fromText(r.From))
	}
	if leaf := p.Status.LeafAttempts; leaf > 0 && int64(leaf) != product {
		line += fmt.Sprintf("  (status: leafAttempts %d)", leaf)
	}
	fmt.Fprintln(w, line)
	if hidden := hiddenText(p); hidden != "" {
		fmt.Fprintf(w, "%s    hidden layers: %s\n", indent, hidden)
	}
	if len(n.Children) == 0 || over {
		fmt.Fprintf(w, "%s    = %s\n", indent, chain)
	}
	for i, c := range n.Children {
		branch, next := "├─ ", "│  "
		if i == len(n.Children)-1 {
			branch, next = "└─ ", "   "
		}
		f.writeNode(w, o, c, home, indent+branch, indent+next)
	}
}

// WriteDot renders the forest as a Graphviz digraph: one cluster per
// namespace, an edge from each caller to the layer it calls, a dashed edge
// from each policy to its budget. Paths over the limit and policies that
// are not Ready are red.
func (f *Forest) WriteDot(w io.Writer, o Options) {
	fmt.Fprintln(w, "digraph retryguard {")
	fmt.Fprintln(w, "  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];")
	byNS := map[string][]*Node{}
	var namespaces []string
	for _, k := range sortedKeys(f.Nodes) {
		if _, ok := byNS[k.Namespace]; !ok {
			namespaces = append(namespaces, k.Namespace)
		}
		byNS[k.Namespace] = append(byNS[k.Namespace], f.Nodes[k])
	}
	for _, ns := range namespaces {
		fmt.Fprintf(w, "  subgraph %q {\n    label=%q;\n", "cluster_"+ns, "namespace "+ns)
		for _, n := range byNS[ns] {
			p := n.Policy
			chain := n.Chain()
			ready := ReadyOf(p.Status.Conditions, p.Generation)
			layer := fmt.Sprintf("layer %s ×%d", p.Spec.Layer.Name, p.Spec.MaxAttempts)
			if h := HiddenAttempts(p); h > 1 {
				layer += fmt.Sprintf(" ×%d hidden", h)
			}
			label := fmt.Sprintf("%s\n%s\nproduct %d\n%s", n.Name, layer, chain.Product(), readyText(ready))
			if hidden := hiddenText(p); hidden != "" {
				label += "\nhidden: " + hidden
			}
			color := "black"
			if (o.MaxLeafAttempts > 0 && chain.Product() > o.MaxLeafAttempts) || ready.Status == "False" {
				color = "red"
			}
			fmt.Fprintf(w, "    %q [label=%q, color=%s];\n", n.Key.String(), label, color)
		}
		for _, b := range f.Budgets {
			if b.Namespace != ns {
				continue
			}
			label := fmt.Sprintf("RetryBudget %s\nMISSING", b.Name)
			if b.Budget != nil {
				s := b.Budget.Spec.WithDefaults()
				label = fmt.Sprintf("RetryBudget %s\n%d%% / %s", b.Name, s.RetryPercent, s.Window.Duration())
			}
			fmt.Fprintf(w, "    %q [shape=ellipse, label=%q];\n", "budget:"+b.Key.String(), label)
		}
		fmt.Fprintln(w, "  }")
	}
	for _, k := range sortedKeys(f.Nodes) {
		n := f.Nodes[k]
		switch {
		case n.Parent != nil && n.NotPermitted != nil:
			fmt.Fprintf(w, "  %q -> %q [style=dotted, color=red, label=%q];\n", n.Parent.Key.String(), k.String(), "not permitted")
		case n.Parent != nil:
			fmt.Fprintf(w, "  %q -> %q;\n", n.Parent.Key.String(), k.String())
		}
	}
	for _, b := range f.Budgets {
		for _, u := range b.Users {
			fmt.Fprintf(w, "  %q -> %q [style=dashed, arrowhead=none];\n", u.String(), "budget:"+b.Key.String())
		}
	}
	fmt.Fprintln(w, "}")
}

func sortedKeys(m map[Key]*Node) []Key {
	keys := make([]Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slicesSortKeys(keys)
	return keys
}
