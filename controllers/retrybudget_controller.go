package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets/status,verbs=patch
// Setting blockOwnerDeletion on the count's owner reference, as on a
// policy's (see RetryPolicyReconciler).
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets/finalizers,verbs=update

// RetryBudgetReconciler counts the policies that draw on each budget and,
// for a fleet budget, the pods that share it, publishes that count once in
// the budget's own ConfigMap (retrybudget-<name>, which every pod of the
// budget joins to its payloads), and reports whether the budget is in
// force. Publishing the budget's figures is the RetryPolicyReconciler's,
// which inlines them in every payload; a count change rewrites no payload.
// It is safe for concurrent reconciles.
type RetryBudgetReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	Limits policygraph.Limits
	// Recorder records the events of budgetEvents; nil records none.
	Recorder events.EventRecorder
	// Clock dates consumer counts; nil is the wall clock.
	Clock clock.Clock
	// ConsumerCountRefresh is how often a fleet budget's count is published
	// again with a new observedAt; 0 means policyconfig.ConsumerCountRefresh,
	// which the pods' staleness bound assumes.
	ConsumerCountRefresh time.Duration

	leases consumerLeases
}

// Reconcile fetches the budget, counts its users, publishes a fleet
// budget's count, and patches status once.
func (r *RetryBudgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	var b v1.RetryBudget
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		r.leases.forget(req.NamespacedName) // the garbage collector deletes its ConfigMap
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := b.DeepCopy()
	defer func() {
		r.reportStatus(before, &b)
		if !equality.Semantic.DeepEqual(before.Status, b.Status) {
			retErr = errors.Join(retErr, client.IgnoreNotFound(r.Status().Patch(ctx, &b, client.MergeFrom(before))))
		}
	}()

	var users v1.RetryPolicyList
	if err := r.List(ctx, &users, client.InNamespace(b.Namespace), client.MatchingFields{policyindex.IndexBudgetRef: b.Name}); err != nil {
		return ctrl.Result{}, err
	}
	b.Status.PolicyCount = int32(len(users.Items))
	// No count for a budget without consumers, nor for a selector that
	// escaped validation (evaluateBudget reports it): its payloads are not
	// Counted, and its pods take the conservative share. A failed count or
	// publication keeps the last one, which goes stale: no share.
	var consumers *int32
	var res ctrl.Result
	if sel, err := consumerSelector(&b); err == nil && sel != nil {
		now := r.now().UTC()
		tally, err := countConsumers(ctx, r.Client, &b, sel)
		if err != nil {
			return ctrl.Result{}, err
		}
		consumers = &tally.Count
		refresh := r.ConsumerCountRefresh
		if refresh <= 0 {
			refresh = policyconfig.ConsumerCountRefresh
		}
		c, due := r.leases.renew(req.NamespacedName, b.UID, tally, now, refresh)
		if err := r.publishCount(ctx, &b, c); err != nil {
			return ctrl.Result{}, err
		}
		res.RequeueAfter = due // the count's lease
	}
	b.Status.Consumers = consumers
	meta.SetStatusCondition(&b.Status.Conditions, evaluateBudget(&b, b.Status.PolicyCount, r.Limits))
	b.Status.ObservedGeneration = b.Generation
	return res, nil
}

// publishCount makes the budget's ConfigMap hold its count.
func (r *RetryBudgetReconciler) publishCount(ctx context.Context, b *v1.RetryBudget, c policyconfig.Consumers) error {
	data, err := policyconfig.MarshalCount(&policyconfig.Count{SchemaVersion: policyconfig.CountSchemaVersion,
		Namespace: b.Namespace, Budget: b.Name, UID: string(b.UID), Consumers: c})
	if err != nil {
		return fmt.Errorf("encoding the consumer count: %w", err)
	}
	scheme := r.Scheme
	if scheme == nil {
		scheme = r.Client.Scheme()
	}
	return publishConfigMap(ctx, r.Client, b, scheme, publishedConfigMap{
		Name:    policyconfig.BudgetConfigMapName(b.Name),
		Labels:  map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.BudgetLabel: labelValue(b.Name)},
		DataKey: policyconfig.CountDataKey, Data: data,
	})
}

func (r *RetryBudgetReconciler) now() time.Time {
	if r.Clock == nil {
		return clock.Real{}.Now()
	}
	return r.Clock.Now()
}
