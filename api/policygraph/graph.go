// Package policygraph holds the rules that need more than one object: the
// attempt product along parentRef chains, parentRef cycles, and failure
// domains shared across criticalities. The admission webhooks apply them
// before a policy is stored; the controllers apply them again afterwards,
// because two admissions can race past each other.
//
// The rules are pure functions over a Lookup, so they are table-tested with
// a static fake and served in production from the manager's cache through
// field indexes: one admission costs O(chain depth + pool users), never
// O(policies in the cluster).
package policygraph

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Platform limits, set by the manager's flags.
const (
	// DefaultMaxLeafAttempts is the spec's end-to-end ceiling of three total
	// attempts: only one layer of a call tree may retry.
	DefaultMaxLeafAttempts = int64(3)
	// DefaultMaxRetryPercent caps RetryBudget.spec.retryPercent.
	DefaultMaxRetryPercent = int32(10)
	// MaxDepth bounds how far a chain is followed; deeper is refused as a cycle would be.
	MaxDepth = 32
)

// Limits are the platform's cross-object limits.
type Limits struct {
	// MaxLeafAttempts is the largest product of maxAttempts along any chain.
	MaxLeafAttempts int64
	// MaxRetryPercent is the largest RetryBudget.spec.retryPercent.
	MaxRetryPercent int32
}

// DefaultLimits returns the platform's default limits.
func DefaultLimits() Limits {
	return Limits{MaxLeafAttempts: DefaultMaxLeafAttempts, MaxRetryPercent: DefaultMaxRetryPercent}
}

// Lookup reads RetryPolicies and the labels of namespaces. Get returns nil,
// nil for a policy that does not exist. Each list answers one indexed
// question, so the cost of a rule follows what it asks about, not the
// cluster's size. The policies it returns are read-only: they may be the
// cache's own.
type Lookup interface {
	// Get reads one policy.
	Get(ctx context.Context, key types.NamespacedName) (*v1.RetryPolicy, error)
	// Children lists the policies, in every namespace, whose parentRef
	// names parent.
	Children(ctx context.Context, parent types.NamespacedName) ([]v1.RetryPolicy, error)
	// PoolUsers lists the policies of namespace that use the pool.
	PoolUsers(ctx context.Context, namespace, pool string) ([]v1.RetryPolicy, error)
	// BudgetUsers lists the policies, in every namespace, of one
	// criticality that draw on the budget (BudgetKeyOf).
	BudgetUsers(ctx context.Context, budget types.NamespacedName, crit v1.Criticality) ([]v1.RetryPolicy, error)
	// Budget reads one RetryBudget; nil when it does not exist.
	Budget(ctx context.Context, key types.NamespacedName) (*v1.RetryBudget, error)
	// NamespaceLabels reads a namespace's labels; found is false when the
	// lookup does not know the namespace.
	NamespaceLabels(ctx context.Context, namespace string) (labels map[string]string, found bool, err error)
}

// ChildVisitor is implemented by a Lookup that can read a parent's children
// where they are stored, without building a list of them: a review of a
// parent with 10,000 children then copies none of them, and each leaf
// costs one index read rather than a list (docs/webhooks.md, bounded
// work). visit must not modify or keep the policy; an error it returns
// ends the visit and is returned. in is false, and nothing visited, when
// the children cannot be read in place right now (a cache not synced yet):
// the rules then list them through Children.
type ChildVisitor interface {
	VisitChildren(ctx context.Context, parent types.NamespacedName, visit func(*v1.RetryPolicy) error) (in bool, err error)
}

// visitChildren visits parent's children through lk, in place where lk is
// a ChildVisitor.
func visitChildren(ctx context.Context, lk Lookup, parent types.NamespacedName, visit func(*v1.RetryPolicy) error) error {
	if cv, ok := lk.(ChildVisitor); ok {
		if in, err := cv.VisitChildren(ctx, parent, visit); in || err != nil {
			return err
		}
	}
	children, err := lk.Children(ctx, parent)
	if err != nil {
		return err
	}
	for i := range children {
		if err := visit(&children[i]); err != nil {
			return err
		}
	}
	return nil
}

// Layer is one policy's place in a chain.
type Layer struct {
	// Namespace is the policy's namespace.
	Namespace string
	Policy    string
	Layer     string
	// MaxAttempts is the policy's maxAttempts, as AttemptsOf charges it.
	MaxAttempts int32
	// Hidden is layer.hiddenAttempts: the attempts someone else's code (an
	// SDK, a proxy) makes for each of MaxAttempts. 0 reads as 1, nothing hidden.
	Hidden int32
}

// Calls is what the layer multiplies a chain by: its own attempts times
// the hidden ones.
func (l Layer) Calls() int64 {
	return int64(max(l.MaxAttempts, 0)) * int64(max(l.Hidden, 1))
}

// LayerOf is p's layer as a chain holds it, hidden attempts included.
func LayerOf(p *v1.RetryPolicy) Layer {
	return Layer{Namespace: p.Namespace, Policy: p.Name, Layer: p.Spec.Layer.Name, MaxAttempts: AttemptsOf(&p.Spec),
		Hidden: ptr.Deref(p.Spec.Layer.HiddenAttempts, v1.DefaultHiddenAttempts)}
}

// AttemptsOf is the most calls one operation of a layer sends: maxAttempts,
// which counts hedges as attempts. A policy stored with more hedges than
// maxAttempts holds (one that escaped CEL) is charged 1 + maxHedges, so that
// hedges always count in the layer product.
func AttemptsOf(s *v1.RetryPolicySpec) int32 {
	if h := s.Hedging; h != nil && h.MaxHedges >= s.MaxAttempts {
		return 1 + h.MaxHedges
	}
	return s.MaxAttempts
}

// Chain is a path of layers, the outermost caller first.
type Chain []Layer

// Product multiplies the attempts along the chain, hidden attempts
// included, saturating at MaxInt64. Three layers of three total attempts
// make 27 calls to the dependency.
func (c Chain) Product() int64 {
	p := int64(1)
	for _, l := range c {
		a := l.Calls()
		if a != 0 && p > math.MaxInt64/a {
			return math.MaxInt64
		}
		p *= a
	}
	return p
}

// String renders the chain as the webhook's message shows it:
// "workflow(3) × job(3) × connector(3) = 27", and a layer with hidden
// attempts as "connector(3×3 hidden)". A chain that crosses namespaces
// names each layer's namespace: "gateway/workflow(3) × payments/connector(3)".
func (c Chain) String() string { return c.render(namesAll) }

// Policies lists the policy names along the chain, namespace/name when the
// chain crosses namespaces.
func (c Chain) Policies() string { return c.renderPolicies(namesAll) }

func namesAll(Layer) bool { return true }

// render is String where only the layers named reports true for are named:
// each run of other layers reads as its count and the calls it multiplies
// by, "2 layers in other namespaces (×9)" (docs/security.md, what a refusal
// names).
func (c Chain) render(named func(Layer) bool) string {
	qualify := c.crossesNamespaces()
	var parts []string
	c.runs(named, func(run Chain, shown bool) {
		if !shown {
			parts = append(parts, fmt.Sprintf("%s (×%d)", inOtherNamespaces(len(run), "layer", "layers"), run.Product()))
			return
		}
		for _, l := range run {
			name := l.Layer
			if qualify {
				name = l.Namespace + "/" + name
			}
			if l.Hidden > 1 {
				parts = append(parts, fmt.Sprintf("%s(%d×%d hidden)", name, l.MaxAttempts, l.Hidden))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s(%d)", name, l.MaxAttempts))
		}
	})
	return fmt.Sprintf("%s = %d", strings.Join(parts, " × "), c.Product())
}

// renderPolicies is Policies where only the layers named reports true for
// are named, each run of others read as its count.
func (c Chain) renderPolicies(named func(Layer) bool) string {
	qualify := c.crossesNamespaces()
	var names []string
	c.runs(named, func(run Chain, shown bool) {
		if !shown {
			names = append(names, inOtherNamespaces(len(run), "policy", "policies"))
			return
		}
		for _, l := range run {
			if qualify {
				names = append(names, l.Namespace+"/"+l.Policy)
				continue
			}
			names = append(names, l.Policy)
		}
	})
	return strings.Join(names, " → ")
}

// runs calls each for the chain's maximal runs of layers that named
// reports alike, in order.
func (c Chain) runs(named func(Layer) bool, each func(run Chain, shown bool)) {
	for i := 0; i < len(c); {
		shown, j := named(c[i]), i+1
		for j < len(c) && named(c[j]) == shown {
			j++
		}
		each(c[i:j], shown)
		i = j
	}
}

// inOtherNamespaces counts n objects a message may not name: "1 layer in
// another namespace", "2 layers in other namespaces".
func inOtherNamespaces(n int, one, many string) string {
	if n == 1 {
		return "1 " + one + " in another namespace"
	}
	return fmt.Sprintf("%d %s in other namespaces", n, many)
}

func (c Chain) crossesNamespaces() bool {
	return slices.ContainsFunc(c, func(l Layer) bool { return l.Namespace != c[0].Namespace })
}

// Analysis is a policy's position in its call tree. The tree is cut where a
// parent does not consent to a child from another namespace: such a child
// is neither a descendant of the parent nor has the parent as an ancestor.
type Analysis struct {
	// Ancestors are the calling layers, the outermost first.
	Ancestors Chain
	// Self is the policy analysed, as it would be stored.
	Self Layer
	// Descendants is the path below Self with the largest attempt product,
	// each layer at its declared attempts (Hidden 1): a descendant's hidden
	// layers are charged to the descendant (Charged), so they are not read.
	Descendants Chain
	// MissingParent names the first parentRef that does not exist yet:
	// its name, or namespace/name when it is in another namespace.
	MissingParent string
	// NotPermitted is set when Self's own parent, in another namespace,
	// does not allow Self's namespace.
	NotPermitted *Refusal
	// Unpermitted are Self's children, from other namespaces, that Self's
	// layer.allowedChildren does not allow; they are not counted.
	Unpermitted []types.NamespacedName
	// Cycle lists the policies of a parentRef cycle through Self, if any.
	Cycle []string
	// cycle is Cycle's keys, so that a refusal names only what it may.
	cycle []types.NamespacedName
	// TooDeep is set when a chain is longer than MaxDepth.
	TooDeep bool
}

// Refusal is a parent's refusal of a child from another namespace.
type Refusal struct {
	// Parent is the parent that refuses.
	Parent types.NamespacedName
	// From is the parent's layer.allowedChildren.namespaces.from.
	From v1.FromNamespaces
}

// LeafAttempts is the product along the parentRef chain down to this policy:
// the calls one top-level operation can make through it.
func (a Analysis) LeafAttempts() int64 {
	return append(append(Chain{}, a.Ancestors...), a.Self).Product()
}

// Worst is the chain through this policy with the largest attempt product,
// as the policy's own verdict holds it: the ancestors and Self with their
// hidden layers, the descendants at their declared attempts. Blame stays
// with the layer that caused it (docs/hidden-layers.md, whose verdict): a
// hidden layer (layer.hiddenAttempts, a VirtualService) multiplies every
// call below it, so it counts in the verdict of its own policy and of the
// policies below, never in a caller's, which may be another team's in
// another namespace. The layer whose hidden attempts tip a chain over the
// limit is the lowest one that completes it, and only it and those below
// turn not Ready and NoRetry.
func (a Analysis) Worst() Chain {
	c := append(append(Chain{}, a.Ancestors...), a.Self)
	return append(c, a.Descendants...)
}

// ParentKey is the policy p's parentRef names: its namespace defaults to
// p's own. ok is false when p has no parent.
func ParentKey(p *v1.RetryPolicy) (key types.NamespacedName, ok bool) {
	ref := p.Spec.Layer.ParentRef
	if ref == nil {
		return types.NamespacedName{}, false
	}
	ns := p.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = *ref.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: ref.Name}, true
}

// displayName is key as a message names it seen from namespace home: the
// bare name at home, namespace/name elsewhere.
func displayName(key types.NamespacedName, home string) string {
	if key.Namespace == home {
		return key.Name
	}
	return key.String()
}

// Analyze places p, as it would be stored, in its call tree: it follows
// parentRef up to the root and children down to the worst leaf, across
// namespaces where the parents consent.
func Analyze(ctx context.Context, lk Lookup, p *v1.RetryPolicy) (Analysis, error) {
	layer, err := LayerIn(ctx, lk, p)
	if err != nil {
		return Analysis{}, err
	}
	a := Analysis{Self: layer}
	consent := newConsent(lk)
	self := keyOf(p)
	path := []types.NamespacedName{self}
	onPath := map[types.NamespacedName]bool{self: true}
	for cur := p; ; {
		key, ok := ParentKey(cur)
		if !ok {
			break
		}
		if onPath[key] {
			a.cycle = cycleFrom(path, key)
			a.Cycle = make([]string, len(a.cycle))
			for i, k := range a.cycle {
				a.Cycle[i] = displayName(k, p.Namespace)
			}
			return a, nil
		}
		if len(path) > MaxDepth {
			a.TooDeep = true
			return a, nil
		}
		parent, err := lk.Get(ctx, key)
		if err != nil {
			return a, err
		}
		if parent == nil {
			a.MissingParent = displayName(key, p.Namespace)
			break
		}
		permitted, err := consent.permits(ctx, parent, cur.Namespace)
		if err != nil {
			return a, err
		}
		if !permitted {
			// The parent does not count cur, so cur is published NoRetry
			// and makes a single attempt (its hidden layers still retry).
			// The parent still calls it as often as the parent's own chain
			// does, so the walk goes on: the layers below cur must count
			// every caller above it.
			if cur == p {
				a.NotPermitted = &Refusal{Parent: key, From: FromOf(parent)}
				a.Self.MaxAttempts = min(a.Self.MaxAttempts, 1)
			} else {
				a.Ancestors[0].MaxAttempts = min(a.Ancestors[0].MaxAttempts, 1)
			}
		}
		layer, err := LayerIn(ctx, lk, parent)
		if err != nil {
			return a, err
		}
		a.Ancestors = append(Chain{layer}, a.Ancestors...)
		path = append(path, key)
		onPath[key] = true
		cur = parent
	}
	// The walk down starts at p's own depth, so that a chain too deep is
	// refused at the policy whose change completes it (an attach of a deep
	// subtree below a shallow parent), never left to turn its root too deep.
	desc, deep, unpermitted, err := descendantsOf(ctx, lk, consent, p, onPath, len(a.Ancestors))
	a.Descendants, a.TooDeep, a.Unpermitted = desc, deep, unpermitted
	return a, err
}

// keyOf is p's key.
func keyOf(p *v1.RetryPolicy) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// cycleFrom turns the upward path (child, parent, grandparent, ...) that
// reached key again into the cycle in call order, caller first:
// a's parent c, c's parent b, b's parent a reads "a → b → c → a".
func cycleFrom(path []types.NamespacedName, key types.NamespacedName) []types.NamespacedName {
	start := slices.Index(path, key)
	out := []types.NamespacedName{key}
	for i := len(path) - 1; i > start; i-- {
		out = append(out, path[i])
	}
	return append(out, key)
}

// MayName reports whether a message to whoever asked to store p may name
// the policy key: p itself, a policy of p's own namespace, or the parent
// p's spec references. Any other policy is another tenant's, which the
// requester may not be allowed to read (admission answers whoever can
// reach the webhook), so messages count such policies and never name them,
// nor their namespace, layer, criticality or target (docs/security.md,
// what a refusal names).
func MayName(p *v1.RetryPolicy, key types.NamespacedName) bool {
	if key.Namespace == p.Namespace {
		return true
	}
	parent, ok := ParentKey(p)
	return ok && key == parent
}

// worstDescendants returns the path below parent, which has depth
// ancestors, with the largest product. Each policy has one parent, so the
// walk visits each descendant once. A child the parent does not consent to
// is skipped; the ones directly below the analysed policy are reported in
// unpermitted (nil below it).
func worstDescendants(ctx context.Context, lk Lookup, consent *consent, parent *v1.RetryPolicy,
	onPath map[types.NamespacedName]bool, depth int, unpermitted *[]types.NamespacedName) (Chain, bool, error) {
	if depth > MaxDepth {
		return nil, true, nil
	}
	var best Chain
	bestProduct := int64(1)
	tooDeep := false
	err := visitChildren(ctx, lk, keyOf(parent), func(c *v1.RetryPolicy) error {
		// A review whose caller gave up (the API server's timeout) or whose
		// budget ran out stops here: a flood of reviews of a parent with
		// thousands of children costs no more than their deadlines.
		if err := ctx.Err(); err != nil {
			return err
		}
		key := keyOf(c)
		if onPath[key] {
			return nil // a stored cycle the up-walk reports; never loop on it
		}
		permitted, err := consent.permits(ctx, parent, c.Namespace)
		if err != nil {
			return err
		}
		if !permitted {
			if unpermitted != nil {
				*unpermitted = append(*unpermitted, key)
			}
			return nil
		}
		onPath[key] = true
		below, deep, err := worstDescendants(ctx, lk, consent, c, onPath, depth+1, nil)
		delete(onPath, key)
		if err != nil {
			return err
		}
		tooDeep = tooDeep || deep
		layer := LayerOf(c)
		layer.Hidden = 1 // charged to c, in c's own verdict
		chain := append(Chain{layer}, below...)
		if pr := chain.Product(); best == nil || pr > bestProduct {
			best, bestProduct = chain, pr
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return best, tooDeep, nil
}
