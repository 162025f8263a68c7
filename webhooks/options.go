package webhooks

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/limits"
)

// BindFlags registers the platform limits as manager flags, starting from
// the defaults.
func BindFlags(fs *flag.FlagSet, platform *policygraph.Limits) {
	*platform = policygraph.DefaultLimits()
	fs.Func("max-leaf-attempts", fmt.Sprintf(
		"Largest product of maxAttempts along a parentRef chain, from %d to %d (default %d: only one layer may retry).",
		1, limits.MaxPlatformLeafAttempts, policygraph.DefaultMaxLeafAttempts), func(s string) error {
		v, err := boundedInt(s, 1, limits.MaxPlatformLeafAttempts)
		platform.MaxLeafAttempts = v
		return err
	})
	fs.Func("max-retry-percent", fmt.Sprintf(
		"Largest RetryBudget retryPercent the platform allows, from %d to %d (default %d).",
		1, limits.MaxBudgetRetryPercent, policygraph.DefaultMaxRetryPercent), func(s string) error {
		v, err := boundedInt(s, 1, int64(limits.MaxBudgetRetryPercent))
		platform.MaxRetryPercent = int32(v)
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
func SetupWithManager(_ context.Context, mgr ctrl.Manager, platform policygraph.Limits) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &v1.RetryPolicy{}).
		WithValidator(&RetryPolicyValidator{Reader: mgr.GetCache(), Limits: platform}).
		Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &v1.RetryBudget{}).
		WithValidator(&RetryBudgetValidator{Limits: platform}).
		Complete()
}
