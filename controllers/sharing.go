package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// A budget shared with other namespaces (consumers.namespaces) counts the
// pods of every namespace it admits, and its count and member shards are
// published in its own namespace and copied into each other namespace
// whose admitted policies draw on it, since a pod reads only its own
// namespace's ConfigMaps (docs/configmap-format.md, "Shared budgets"). A
// copy is controlled by one of those policies, because an owner reference
// cannot cross namespaces: the garbage collector deletes the copy with the
// namespace's last such policy, and the controller deletes a copy whose
// namespace no longer draws on the budget, or whose budget is gone.
//
// Copies that are no longer wanted are deleted.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=delete

// countTarget is one namespace a budget's count is published in, and the
// object that controls it there: the budget in its own namespace, a policy
// that draws on it elsewhere.
type countTarget struct {
	Namespace string
	Owner     client.Object
}

// admittedNamespaces says which namespaces' pods b counts: all, or those
// listed (its own first). A namespace whose labels cannot be read is not
// admitted by a Selector: a pod of it takes no share, never more.
func admittedNamespaces(ctx context.Context, r client.Reader, b *v1.RetryBudget) (all bool, namespaces []string, err error) {
	switch policygraph.ConsumersFrom(b) {
	case v1.NamespacesFromAll:
		return true, nil, nil
	case v1.NamespacesFromSelector:
	default:
		return false, []string{b.Namespace}, nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.List(ctx, list); err != nil {
		return false, nil, fmt.Errorf("listing the namespaces RetryBudget %s may admit: %w", b.Name, err)
	}
	namespaces = []string{b.Namespace}
	for i := range list.Items {
		if ns := list.Items[i].Name; ns != b.Namespace && policygraph.BudgetAdmits(b, ns, list.Items[i].Labels) {
			namespaces = append(namespaces, ns)
		}
	}
	return false, namespaces, nil
}

// admits reports whether b admits namespace ns, reading its labels from r's
// cache; a namespace whose labels cannot be read is not admitted.
func admits(ctx context.Context, r client.Reader, b *v1.RetryBudget, ns string) bool {
	ok, err := policygraph.BudgetAdmitsNamespace(ctx, policyindex.CacheLookup{Reader: r}, b, ns)
	return ok && err == nil
}

// countTargets are the namespaces b's count is published in: its own, then
// every other namespace of an admitted user, controlled there by the user
// whose name sorts first (so that the owner changes only when that policy
// goes). A namespace whose copies' names would not fit the object name
// limit gets none: its pods hold no share.
func countTargets(ctx context.Context, r client.Reader, b *v1.RetryBudget, users []v1.RetryPolicy) []countTarget {
	owners := map[string]*v1.RetryPolicy{}
	for i := range users {
		u := &users[i]
		if u.Namespace == b.Namespace || !copyNamesFit(u.Namespace, b) || !u.DeletionTimestamp.IsZero() {
			continue // a policy being deleted owns no copy: the garbage collector would take it along
		}
		if o, ok := owners[u.Namespace]; (!ok || u.Name < o.Name) && admits(ctx, r, b, u.Namespace) {
			owners[u.Namespace] = u
		}
	}
	out := []countTarget{{Namespace: b.Namespace, Owner: b}}
	for _, ns := range slices.Sorted(maps.Keys(owners)) {
		out = append(out, countTarget{Namespace: ns, Owner: owners[ns]})
	}
	return out
}

// copyNamesFit reports whether b's copies in namespace ns have names within
// the object name limit.
func copyNamesFit(ns string, b *v1.RetryBudget) bool {
	return len(policyconfig.MemberShardConfigMapNameIn(ns, "00", b.Namespace, b.Name)) <= limits.MaxObjectNameLength
}

// sharedKeyOf is the budget whose copy a ConfigMap's name says it is, if any.
func sharedKeyOf(name string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(name, policyconfig.SharedBudgetConfigMapPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(name, policyconfig.SharedMembersConfigMapPrefix); ok {
			_, rest, ok = strings.Cut(rest, "-") // the shard
		}
	}
	if !ok {
		return types.NamespacedName{}, false
	}
	ns, budget, ok := strings.Cut(rest, ".")
	return types.NamespacedName{Namespace: ns, Name: budget}, ok && ns != "" && budget != ""
}

// budgetOfCopy maps a copy of a budget's count or shard to the budget, so
// that a copy edited or deleted by anyone but the controller is repaired.
func budgetOfCopy(_ context.Context, o client.Object) []reconcile.Request {
	if key, ok := sharedKeyOf(o.GetName()); ok && key.Namespace != o.GetNamespace() {
		return []reconcile.Request{{NamespacedName: key}}
	}
	return nil
}

// deleteStaleCopies deletes the copies of budget's count and shards in every
// namespace outside keep (nil: every copy, the budget being gone), read from
// the cache of published ConfigMaps.
func deleteStaleCopies(ctx context.Context, c client.Client, budget types.NamespacedName, keep map[string]bool) error {
	for _, label := range []string{policyconfig.BudgetLabel, policyconfig.MembersLabel} {
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.MatchingLabels{policyconfig.ManagedByLabel: policyconfig.ManagedByValue,
			label: labelValue(budget.Name)}); err != nil {
			return fmt.Errorf("listing the copies of RetryBudget %s: %w", budget, err)
		}
		for i := range cms.Items {
			cm := &cms.Items[i]
			if key, ok := sharedKeyOf(cm.Name); !ok || key != budget || cm.Namespace == budget.Namespace || keep[cm.Namespace] {
				continue
			}
			if err := c.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s/%s: %w", cm.Namespace, cm.Name, err)
			}
		}
	}
	return nil
}
