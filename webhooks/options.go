package webhooks

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// SetupWithManager registers both validating webhooks. The cache must have
// the indexes from policyindex.RegisterIndexes.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, limits policygraph.Limits) error {
	policies, err := NewRetryPolicyValidator(ctx, mgr.GetCache(), limits)
	if err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &v1.RetryPolicy{}).
		WithValidator(policies).
		Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &v1.RetryBudget{}).
		WithValidator(&RetryBudgetValidator{Limits: limits}).
		Complete()
}
