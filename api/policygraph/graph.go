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

	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Platform limits, set by the manager's flags.
const (
	// DefaultMaxLeafAttempts is the seed's end-to-end ceiling of three total
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

// Lookup reads the RetryPolicies of one namespace. Get returns nil, nil for
// a policy that does not exist. Each list answers one indexed question, so
// the cost of a rule follows what it asks about, not the namespace's size.
type Lookup interface {
	Get(ctx context.Context, name string) (*v1.RetryPolicy, error)
	Children(ctx context.Context, parent string) ([]v1.RetryPolicy, error)
	PoolUsers(ctx context.Context, pool string) ([]v1.RetryPolicy, error)
	BudgetUsers(ctx context.Context, budget string, crit v1.Criticality) ([]v1.RetryPolicy, error)
}

// Layer is one policy's place in a chain.
type Layer struct {
	Policy   string
	Layer    string
	Attempts int32
	// Hidden is layer.hiddenAttempts: the attempts someone else's code (an
	// SDK, a proxy) makes for each of Attempts. 0 reads as 1, nothing hidden.
	Hidden int32
}

// Calls is what the layer multiplies a chain by: its own attempts times
// the hidden ones.
func (l Layer) Calls() int64 {
	return int64(max(l.Attempts, 0)) * int64(max(l.Hidden, 1))
}

// LayerOf is p's layer as a chain holds it, hidden attempts included.
func LayerOf(p *v1.RetryPolicy) Layer {
	return Layer{Policy: p.Name, Layer: p.Spec.Layer.Name, Attempts: p.Spec.MaxAttempts,
		Hidden: ptr.Deref(p.Spec.Layer.HiddenAttempts, v1.DefaultHiddenAttempts)}
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
// attempts as "connector(3×3 hidden)".
func (c Chain) String() string {
	parts := make([]string, len(c))
	for i, l := range c {
		if l.Hidden > 1 {
			parts[i] = fmt.Sprintf("%s(%d×%d hidden)", l.Layer, l.Attempts, l.Hidden)
			continue
		}
		parts[i] = fmt.Sprintf("%s(%d)", l.Layer, l.Attempts)
	}
	return fmt.Sprintf("%s = %d", strings.Join(parts, " × "), c.Product())
}

// Policies lists the policy names along the chain.
func (c Chain) Policies() string {
	names := make([]string, len(c))
	for i, l := range c {
		names[i] = l.Policy
	}
	return strings.Join(names, " → ")
}

// Analysis is a policy's position in its call tree.
type Analysis struct {
	// Ancestors are the calling layers, the outermost first.
	Ancestors Chain
	// Self is the policy analysed, as it would be stored.
	Self Layer
	// Descendants is the path below Self with the largest attempt product.
	Descendants Chain
	// MissingParent names the first parentRef that does not exist yet.
	MissingParent string
	// Cycle lists the policies of a parentRef cycle through Self, if any.
	Cycle []string
	// TooDeep is set when a chain is longer than MaxDepth.
	TooDeep bool
}

// LeafAttempts is the product along the parentRef chain down to this policy:
// the calls one top-level operation can make through it.
func (a Analysis) LeafAttempts() int64 {
	return append(append(Chain{}, a.Ancestors...), a.Self).Product()
}

// Worst is the chain through this policy with the largest attempt product.
func (a Analysis) Worst() Chain {
	c := append(append(Chain{}, a.Ancestors...), a.Self)
	return append(c, a.Descendants...)
}

// Analyze places p, as it would be stored, in its call tree: it follows
// parentRef up to the root and children down to the worst leaf.
func Analyze(ctx context.Context, lk Lookup, p *v1.RetryPolicy) (Analysis, error) {
	self, err := LayerIn(ctx, lk, p)
	if err != nil {
		return Analysis{}, err
	}
	a := Analysis{Self: self}
	path := []string{p.Name}
	onPath := map[string]bool{p.Name: true}
	for cur := p; cur.Spec.Layer.ParentRef != nil; {
		name := cur.Spec.Layer.ParentRef.Name
		if onPath[name] {
			a.Cycle = cycleFrom(path, name)
			return a, nil
		}
		if len(path) > MaxDepth {
			a.TooDeep = true
			return a, nil
		}
		parent, err := lk.Get(ctx, name)
		if err != nil {
			return a, err
		}
		if parent == nil {
			a.MissingParent = name
			break
		}
		layer, err := LayerIn(ctx, lk, parent)
		if err != nil {
			return a, err
		}
		a.Ancestors = append(Chain{layer}, a.Ancestors...)
		path = append(path, name)
		onPath[name] = true
		cur = parent
	}
	desc, deep, err := worstDescendants(ctx, lk, p.Name, onPath, 0)
	a.Descendants, a.TooDeep = desc, deep
	return a, err
}

// cycleFrom turns the upward path (child, parent, grandparent, ...) that
// reached name again into the cycle in call order, caller first:
// a's parent c, c's parent b, b's parent a reads "a → b → c → a".
func cycleFrom(path []string, name string) []string {
	start := slices.Index(path, name)
	out := []string{name}
	for i := len(path) - 1; i > start; i-- {
		out = append(out, path[i])
	}
	return append(out, name)
}

// worstDescendants returns the path below name with the largest product.
// Each policy has one parent, so the walk visits each descendant once.
func worstDescendants(ctx context.Context, lk Lookup, name string, onPath map[string]bool, depth int) (Chain, bool, error) {
	if depth > MaxDepth {
		return nil, true, nil
	}
	children, err := lk.Children(ctx, name)
	if err != nil {
		return nil, false, err
	}
	var best Chain
	bestProduct := int64(1)
	tooDeep := false
	for i := range children {
		c := &children[i]
		if onPath[c.Name] {
			continue // a stored cycle the up-walk reports; never loop on it
		}
		onPath[c.Name] = true
		below, deep, err := worstDescendants(ctx, lk, c.Name, onPath, depth+1)
		delete(onPath, c.Name)
		if err != nil {
			return nil, false, err
		}
		tooDeep = tooDeep || deep
		layer, err := LayerIn(ctx, lk, c)
		if err != nil {
			return nil, false, err
		}
		chain := append(Chain{layer}, below...)
		if pr := chain.Product(); best == nil || pr > bestProduct {
			best, bestProduct = chain, pr
		}
	}
	return best, tooDeep, nil
}
