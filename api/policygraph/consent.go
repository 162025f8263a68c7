package policygraph

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/codes"
)

// FromOf is the parent's layer.allowedChildren.namespaces.from, Same when unset.
func FromOf(parent *v1.RetryPolicy) v1.FromNamespaces {
	if ac := parent.Spec.Layer.AllowedChildren; ac != nil {
		return fromOf(ac.Namespaces)
	}
	return v1.NamespacesFromSame
}

// ChildPermitted is the consent rule: a child layer in namespace childNS
// may name parent only if it is in the parent's own namespace, or the
// parent's layer.allowedChildren.namespaces.from is All, or it is Selector
// and the selector matches the child namespace's labels. Same, and a
// selector that does not parse, refuse: a foreign child constrains the
// parent's own changes, so consent is never assumed.
func ChildPermitted(parent *v1.RetryPolicy, childNS string, childLabels map[string]string) bool {
	var ns *v1.AllowedNamespaces
	if ac := parent.Spec.Layer.AllowedChildren; ac != nil {
		ns = ac.Namespaces
	}
	return Admits(parent.Namespace, ns, childNS, childLabels)
}

// Admits is every consent's rule (AllowedNamespaces, as Gateway API's
// allowedRoutes): an object of namespace owner admits namespace ns when ns
// is its own, or consent's from is All, or it is Selector and the selector
// matches ns's labels (nsLabels, NamespaceLabelsOf adds the name label).
// Unset (Same) and a selector that does not parse admit no other namespace.
func Admits(owner string, consent *v1.AllowedNamespaces, ns string, nsLabels map[string]string) bool {
	if ns == owner {
		return true
	}
	switch fromOf(consent) {
	case v1.NamespacesFromAll:
		return true
	case v1.NamespacesFromSelector:
		sel, err := metav1.LabelSelectorAsSelector(consent.Selector)
		if err != nil {
			return false
		}
		return sel.Matches(labels.Set(NamespaceLabelsOf(ns, nsLabels)))
	default:
		return false
	}
}

func fromOf(consent *v1.AllowedNamespaces) v1.FromNamespaces {
	if consent == nil || consent.From == nil {
		return v1.NamespacesFromSame
	}
	return *consent.From
}

// ConsumerNamespaces is a budget's consumers.namespaces, nil (Same) when unset.
func ConsumerNamespaces(b *v1.RetryBudget) *v1.AllowedNamespaces {
	if b.Spec.Consumers == nil {
		return nil
	}
	return b.Spec.Consumers.Namespaces
}

// BudgetAdmits is the budget's consent: a policy of namespace ns may draw
// on b, and b's podSelector counts the pods of ns, only when b's
// consumers.namespaces admits ns (Admits). A foreign consumer lowers every
// pod's share and a foreign policy's retries spend the budget, so consent
// is never assumed.
func BudgetAdmits(b *v1.RetryBudget, ns string, nsLabels map[string]string) bool {
	return Admits(b.Namespace, ConsumerNamespaces(b), ns, nsLabels)
}

// ConsumersFrom is b's consumers.namespaces.from, Same when unset.
func ConsumersFrom(b *v1.RetryBudget) v1.FromNamespaces { return fromOf(ConsumerNamespaces(b)) }

// NamespaceLabeler reads a namespace's labels, as Lookup.NamespaceLabels.
type NamespaceLabeler interface {
	NamespaceLabels(ctx context.Context, namespace string) (labels map[string]string, found bool, err error)
}

// BudgetAdmitsNamespace is BudgetAdmits for namespace ns, reading ns's
// labels through lk only when b's consent is a Selector: the one place
// admission and the controllers ask a budget's consent of one namespace.
func BudgetAdmitsNamespace(ctx context.Context, lk NamespaceLabeler, b *v1.RetryBudget, ns string) (bool, error) {
	var nsLabels map[string]string
	if ns != b.Namespace && ConsumersFrom(b) == v1.NamespacesFromSelector {
		var err error
		if nsLabels, _, err = lk.NamespaceLabels(ctx, ns); err != nil {
			return false, err
		}
	}
	return BudgetAdmits(b, ns, nsLabels), nil
}

// BudgetKeyOf is the key of the budget p draws on: budgetRef's namespace,
// defaulted to p's own; ok is false when p names none.
func BudgetKeyOf(p *v1.RetryPolicy) (key types.NamespacedName, ok bool) {
	ref := p.Spec.BudgetRef
	if ref == nil {
		return key, false
	}
	key = types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}
	if ref.Namespace != nil {
		key.Namespace = *ref.Namespace
	}
	return key, true
}

// NamespaceLabelsOf is what a Selector is matched against: the namespace's
// labels, with the kubernetes.io/metadata.name label the API server gives
// every namespace. A namespace a lookup does not know (nil labels) has that
// label only.
func NamespaceLabelsOf(namespace string, nsLabels map[string]string) map[string]string {
	out := maps.Clone(nsLabels)
	if out == nil {
		out = map[string]string{}
	}
	out[corev1.LabelMetadataName] = namespace
	return out
}

// consent answers ChildPermitted through a Lookup, reading each namespace's
// labels once per analysis. It is not safe for concurrent use.
type consent struct {
	lk     Lookup
	labels map[string]map[string]string
	// readLabels is set once a namespace's labels decided a consent, so
	// that a Memo does not keep a walk that labels can change.
	readLabels bool
}

func newConsent(lk Lookup) *consent { return &consent{lk: lk, labels: map[string]map[string]string{}} }

func (c *consent) permits(ctx context.Context, parent *v1.RetryPolicy, childNS string) (bool, error) {
	if childNS == parent.Namespace || FromOf(parent) != v1.NamespacesFromSelector {
		return ChildPermitted(parent, childNS, nil), nil
	}
	c.readLabels = true
	nsLabels, ok := c.labels[childNS]
	if !ok {
		var err error
		if nsLabels, _, err = c.lk.NamespaceLabels(ctx, childNS); err != nil {
			return false, err
		}
		c.labels[childNS] = nsLabels
	}
	return ChildPermitted(parent, childNS, nsLabels), nil
}

// BudgetSelectorErrors checks b's consumers.namespaces.selector with
// LabelSelectorErrors: a budget whose selector does not parse admits no
// other namespace (BudgetAdmits).
func BudgetSelectorErrors(b *v1.RetryBudget, fldPath *field.Path) field.ErrorList {
	ns := ConsumerNamespaces(b)
	if ns == nil {
		return nil
	}
	return LabelSelectorErrors(ns.Selector, fldPath.Child("consumers", "namespaces", "selector"))
}

// SelectorErrors checks p's layer.allowedChildren.namespaces.selector with
// LabelSelectorErrors: a parent whose selector does not parse consents to
// no child from another namespace (ChildPermitted).
func SelectorErrors(p *v1.RetryPolicy, fldPath *field.Path) field.ErrorList {
	ac := p.Spec.Layer.AllowedChildren
	if ac == nil || ac.Namespaces == nil {
		return nil
	}
	return LabelSelectorErrors(ac.Namespaces.Selector, fldPath.Child("layer", "allowedChildren", "namespaces", "selector"))
}

// LabelSelectorErrors is the one single-object rule the CRDs cannot state
// in CEL: that a selector converts to a labels.Selector (an operator it
// knows, values where the operator needs them, label syntax). Admission and
// the controllers check it; every other single-object rule is the CRD's.
func LabelSelectorErrors(sel *metav1.LabelSelector, fldPath *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return field.ErrorList{v1.Invalid(fldPath, nil, codes.InvalidSelector, "not a valid label selector: "+err.Error())}
	}
	return nil
}
