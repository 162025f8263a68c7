package webhooks

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// BindFlags registers the platform limits as manager flags, starting from
// the defaults.
func BindFlags(fs *flag.FlagSet, limits *policygraph.Limits) {
	*limits = policygraph.DefaultLimits()
	fs.Func("max-leaf-attempts", fmt.Sprintf(
		"Largest product of maxAttempts along a parentRef chain, from 1 to 1000 (default %d: only one layer may retry).",
		policygraph.DefaultMaxLeafAttempts), func(s string) error {
		v, err := boundedInt(s, 1, 1000)
		limits.MaxLeafAttempts = v
		return err
	})
	fs.Func("max-retry-percent", fmt.Sprintf(
		"Largest RetryBudget retryPercent the platform allows, from 1 to 100 (default %d).",
		policygraph.DefaultMaxRetryPercent), func(s string) error {
		v, err := boundedInt(s, 1, 100)
		limits.MaxRetryPercent = int32(v)
		return err
	})
}

func boundedInt(s string, lo, hi int64) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("want a whole number from %d to %d, got %q", lo, hi, s)
	}
	return v, nil
}

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
