package controllers

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets/status,verbs=patch

// RetryBudgetReconciler counts the policies that draw on each budget and,
// for a fleet budget, the pods that share it, and reports whether it is in
// force. Publishing the budget's figures is the
// RetryPolicyReconciler's, which inlines them in every payload.
type RetryBudgetReconciler struct {
	client.Client
	Limits policygraph.Limits
	// Recorder records the events of budgetEvents; nil records none.
	Recorder events.EventRecorder
}

// Reconcile fetches the budget, counts its users and patches status once.
func (r *RetryBudgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	var b v1.RetryBudget
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
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
	// escaped validation (evaluateBudget reports it): its pods take the
	// conservative share. A failed count keeps the last one.
	var consumers *int32
	if sel, err := consumerSelector(&b); err == nil && sel != nil {
		tally, err := countConsumers(ctx, r.Client, &b, sel)
		if err != nil {
			return ctrl.Result{}, err
		}
		consumers = &tally.Count
	}
	b.Status.Consumers = consumers
	meta.SetStatusCondition(&b.Status.Conditions, evaluateBudget(&b, b.Status.PolicyCount, r.Limits))
	b.Status.ObservedGeneration = b.Generation
	return ctrl.Result{}, nil
}
