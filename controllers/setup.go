package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// CacheOptions limits what the manager's cache holds: the ConfigMaps
// Retryguard publishes (never every ConfigMap of the cluster), Istio's
// VirtualService CRD alone among CRDs, and pods as trimmed metadata.
func CacheOptions() cache.Options {
	crd, crdCache := virtualServiceCRDCache()
	// Pods, for counting budget consumers, are held as metadata only and
	// trimmed to what counting reads.
	pods := &metav1.PartialObjectMetadata{}
	pods.SetGroupVersionKind(podGVK)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{policyconfig.ManagedByLabel: policyconfig.ManagedByValue})},
		crd:                 crdCache,
		pods:                {Transform: keepCountedPodFields},
	}}
}

// Options configure both controllers.
type Options struct {
	Limits                  policygraph.Limits
	MaxConcurrentReconciles int
	// ResyncPeriod is how often every policy is republished with nothing
	// changed (0: DefaultResyncPeriod); see RetryPolicyReconciler.
	ResyncPeriod time.Duration
}

// SetupWithManager registers both controllers. The cache must have the
// indexes from policyindex.RegisterIndexes.
func SetupWithManager(_ context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.MaxConcurrentReconciles < 1 {
		opts.MaxConcurrentReconciles = 4
	}
	pr := &RetryPolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("retryguard-retrypolicy"), Limits: opts.Limits, ResyncPeriod: opts.ResyncPeriod}
	policies, err := ctrl.NewControllerManagedBy(mgr).
		Named("retrypolicy").
		For(&v1.RetryPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Any change to what we publish (payload, labels, annotations,
		// owners), a deletion, or a label removal (which the label-filtered
		// cache reports as a deletion) is compared with the desired state.
		// The hash annotation is not trusted: whoever can edit the payload
		// can edit it too. Our own writes echo back once as a no-op.
		Owns(&corev1.ConfigMap{}, builder.WithPredicates(publishedFieldsChanged)).
		// A policy's verdict depends on its relatives: the chain, the pool and
		// the budget's other criticality. Any change to one (status
		// included, so that leaf attempts ripple down) re-checks the others.
		Watches(&v1.RetryPolicy{}, handler.EnqueueRequestsFromMapFunc(pr.relatives)).
		// A budget change is republished into every payload that inlines it.
		Watches(&v1.RetryBudget{}, handler.EnqueueRequestsFromMapFunc(pr.budgetUsers),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A change in a fleet budget's consumers is republished at once.
		WatchesMetadata(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(pr.consumersOfPod),
			builder.WithPredicates(podMembershipChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Build(pr)
	if err != nil {
		return err
	}
	if err := setupVirtualServices(mgr, policies, pr); err != nil {
		return err
	}
	br := &RetryBudgetReconciler{Client: mgr.GetClient(), Limits: opts.Limits}
	return ctrl.NewControllerManagedBy(mgr).
		Named("retrybudget").
		For(&v1.RetryBudget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1.RetryPolicy{}, handler.EnqueueRequestsFromMapFunc(budgetOf),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(budgetsOfPod(br.Client)),
			builder.WithPredicates(podMembershipChanged)).
		Complete(br)
}

// relatives maps a policy to the policies whose verdict may depend on it.
func (r *RetryPolicyReconciler) relatives(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1.RetryPolicy)
	if !ok {
		return nil
	}
	lookup := policyindex.CacheLookup{Reader: r.Client, Namespace: p.Namespace}
	seen := map[string]bool{p.Name: true}
	var out []reconcile.Request
	add := func(names ...string) {
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: n}})
			}
		}
	}
	if p.Spec.Layer.ParentRef != nil {
		add(p.Spec.Layer.ParentRef.Name)
	}
	addAll := func(list []v1.RetryPolicy, err error) {
		for _, q := range list {
			add(q.Name)
		}
	}
	addAll(lookup.Children(ctx, p.Name))
	if p.Spec.ConnectionPool != nil {
		addAll(lookup.PoolUsers(ctx, p.Spec.ConnectionPool.Name))
	}
	if p.Spec.BudgetRef != nil {
		addAll(lookup.BudgetUsers(ctx, p.Spec.BudgetRef.Name, policygraph.ClashingCriticality(p)))
	}
	return out
}

// budgetUsers maps a budget to every policy that inlines it.
func (r *RetryPolicyReconciler) budgetUsers(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1.RetryPolicyList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{policyindex.IndexBudgetRef: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return out
}

// budgetOf maps a policy to the budget it draws on, for the budget's count.
func budgetOf(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1.RetryPolicy)
	if !ok || p.Spec.BudgetRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.BudgetRef.Name}}}
}

// publishedFieldsChanged passes ConfigMap events that may need the owner
// republished: deletions, and updates that change a published field.
// Informer resyncs, which change nothing, are dropped.
var publishedFieldsChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*corev1.ConfigMap)
		after, ok2 := e.ObjectNew.(*corev1.ConfigMap)
		return !ok1 || !ok2 || !equality.Semantic.DeepEqual(before.Data, after.Data) ||
			!equality.Semantic.DeepEqual(before.Labels, after.Labels) ||
			!equality.Semantic.DeepEqual(before.Annotations, after.Annotations) ||
			!equality.Semantic.DeepEqual(before.OwnerReferences, after.OwnerReferences)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return true },
}
