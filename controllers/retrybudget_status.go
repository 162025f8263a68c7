package controllers

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// evaluateBudget decides a budget's Ready condition. A budget above the
// platform cap can only exist where admission was bypassed; it is reported,
// and its policies keep the figures they are published with.
func evaluateBudget(b *v1.RetryBudget, policyCount int32, limits policygraph.Limits) metav1.Condition {
	if b.Spec.RetryPercent > limits.MaxRetryPercent {
		return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonAbovePlatformCap,
			Message:            fmt.Sprintf("retryPercent %d is above the platform cap of %d%%", b.Spec.RetryPercent, limits.MaxRetryPercent),
			ObservedGeneration: b.Generation}
	}
	return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonAccepted,
		Message: fmt.Sprintf("%d policies draw on this budget", policyCount), ObservedGeneration: b.Generation}
}
