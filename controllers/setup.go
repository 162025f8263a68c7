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
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// LeaderElectionID names the Lease the manager's replicas elect their
// leader with, in the manager's namespace; kubectl retryguard check reads it.
const LeaderElectionID = "retryguard-manager.policy.retryguard.io"

// CacheOptions limits what the manager's cache holds: the ConfigMaps
// Retryguard publishes (never every ConfigMap of the cluster), Istio's
// VirtualService CRD alone among CRDs, pods as trimmed metadata, and no
// object's managed fields, which nothing reads from the cache (server-side
// apply computes them on the API server) and which are a large part of
// every cached policy and ConfigMap (docs/benchmarks.md, the manager at
// scale).
func CacheOptions() cache.Options {
	crd, crdCache := virtualServiceCRDCache()
	// Pods, for counting budget consumers, are held as metadata only and
	// trimmed to what counting reads.
	pods := &metav1.PartialObjectMetadata{}
	pods.SetGroupVersionKind(podGVK)
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{policyconfig.ManagedByLabel: policyconfig.ManagedByValue})},
		crd:                 crdCache,
		pods:                {Transform: keepCountedPodFields},
	}}
}

// DefaultMaxConcurrentReconciles is how many RetryPolicy reconciles run at
// once. A reconcile waits on the API server for most of its time (an apply
// and a status patch), so more of them publish faster even on 2 cores: with
// 10,000 policies created at once the slowest waited 94 s with 4 and 38 s
// with 32 (docs/benchmarks.md, the manager at scale).
const DefaultMaxConcurrentReconciles = 32

// Options configure both controllers.
type Options struct {
	Limits policygraph.Limits
	// MaxConcurrentReconciles is the RetryPolicy reconciles run at once;
	// below 1, DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// ResyncPeriod is how often every policy is republished with nothing
	// changed (0: DefaultResyncPeriod); see RetryPolicyReconciler.
	ResyncPeriod time.Duration
}

// SetupWithManager registers both controllers. The cache must have the
// indexes from policyindex.RegisterIndexes.
func SetupWithManager(_ context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.MaxConcurrentReconciles < 1 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	pr := &RetryPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(),
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
		// A namespace's labels decide a Selector parent's consent to the
		// namespace's children; metadata is all that is read.
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(pr.foreignChildren),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// A budget change is republished into every payload that inlines its
		// figures; its count is not in them (RetryBudgetReconciler).
		Watches(&v1.RetryBudget{}, handler.EnqueueRequestsFromMapFunc(pr.budgetUsers),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Build(pr)
	if err != nil {
		return err
	}
	if err := setupVirtualServices(mgr, policies, pr); err != nil {
		return err
	}
	br := &RetryBudgetReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Limits: opts.Limits,
		Recorder: mgr.GetEventRecorder("retryguard-retrybudget")}
	return ctrl.NewControllerManagedBy(mgr).
		Named("retrybudget").
		For(&v1.RetryBudget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The budget's count ConfigMap, repaired as a policy's is.
		Owns(&corev1.ConfigMap{}, builder.WithPredicates(publishedFieldsChanged)).
		Watches(&v1.RetryPolicy{}, handler.EnqueueRequestsFromMapFunc(budgetOf),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(budgetsOfPod(br.Client)),
			builder.WithPredicates(podMembershipChanged)).
		// A budget's copies in the namespaces it is shared with are
		// controlled by a policy there, and repaired as its own ConfigMaps are.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(budgetOfCopy), builder.WithPredicates(publishedFieldsChanged)).
		// A namespace's labels decide whether a Selector budget counts its pods.
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(sharedBudgets(br.Client)),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(br)
}

// relatives maps a policy to the policies whose verdict may depend on it:
// its parent and its children in any namespace (a parent's consent decides
// whether a child from another namespace counts), its pool and the users of
// its budget's other criticality.
func (r *RetryPolicyReconciler) relatives(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1.RetryPolicy)
	if !ok {
		return nil
	}
	lookup := policyindex.CacheLookup{Reader: r.Client}
	seen := map[types.NamespacedName]bool{client.ObjectKeyFromObject(p): true}
	var out []reconcile.Request
	add := func(key types.NamespacedName) {
		if !seen[key] {
			seen[key] = true
			out = append(out, reconcile.Request{NamespacedName: key})
		}
	}
	if key, ok := policygraph.ParentKey(p); ok {
		add(key)
	}
	addAll := func(list []v1.RetryPolicy, err error) {
		for i := range list {
			add(client.ObjectKeyFromObject(&list[i]))
		}
	}
	addAll(lookup.Children(ctx, client.ObjectKeyFromObject(p)))
	if p.Spec.ConnectionPool != nil {
		addAll(lookup.PoolUsers(ctx, p.Namespace, p.Spec.ConnectionPool.Name))
	}
	if key, ok := policygraph.BudgetKeyOf(p); ok {
		addAll(lookup.BudgetUsers(ctx, key, policygraph.ClashingCriticality(p)))
	}
	return out
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch

// foreignChildren maps a Namespace to its policies whose parent or budget
// is in another namespace: the namespace's labels decide whether a Selector
// parent or budget consents to them.
func (r *RetryPolicyReconciler) foreignChildren(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1.RetryPolicyList
	if err := r.List(ctx, &list, client.InNamespace(o.GetName())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		parent, child := policygraph.ParentKey(&list.Items[i])
		budget, draws := policygraph.BudgetKeyOf(&list.Items[i])
		if (child && parent.Namespace != o.GetName()) || (draws && budget.Namespace != o.GetName()) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// sharedBudgets maps a Namespace to the budgets of other namespaces that a
// Selector shares: the namespace's labels decide whether its pods count.
func sharedBudgets(r client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1.RetryBudgetList
		if err := r.List(ctx, &list, client.MatchingFields{policyindex.IndexSharedBudget: policyindex.SharedBySelector},
			client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			if list.Items[i].Namespace != o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
}

// budgetUsers maps a budget to every policy that inlines it, in every namespace.
func (r *RetryPolicyReconciler) budgetUsers(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1.RetryPolicyList
	if err := r.List(ctx, &list, client.MatchingFields{policyindex.IndexBudgetRef: policyindex.BudgetRefKey(client.ObjectKeyFromObject(o))}); err != nil {
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
	if !ok {
		return nil
	}
	key, ok := policygraph.BudgetKeyOf(p)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
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
