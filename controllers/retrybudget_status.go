package controllers

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// evaluateBudget decides a budget's Ready condition from its spec and its
// status counts (policyCount, and status.consumers for a fleet budget). A
// budget above the platform cap, or with a pod selector that cannot be
// parsed, can only exist where admission was bypassed; it is reported, and
// its policies keep the figures they are published with (with no consumer
// count, the conservative share).
func evaluateBudget(b *v1.RetryBudget, policyCount int32, limits policygraph.Limits) metav1.Condition {
	notReady := func(reason, format string, args ...any) metav1.Condition {
		return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason,
			Message: fmt.Sprintf(format, args...), ObservedGeneration: b.Generation}
	}
	if b.Spec.RetryPercent > limits.MaxRetryPercent {
		return notReady(v1.ReasonAbovePlatformCap, "retryPercent %d is above the platform cap of %d%%", b.Spec.RetryPercent, limits.MaxRetryPercent)
	}
	if _, err := consumerSelector(b); err != nil {
		return notReady(
			v1.ReasonInvalidSpec,
			"%v; no consumer count is published, so each pod takes the conservative share (the absolute figures over partitions)",
			err,
		)
	}
	msg := fmt.Sprintf("%d policies draw on this budget", policyCount)
	if n := b.Status.Consumers; n != nil {
		partitions := *b.Spec.WithDefaults().Partitions
		msg += fmt.Sprintf("; %d consumers", *n)
		if *n > partitions {
			// The count still bounds the fleet (a pod takes a share only
			// when a count names it), but partitions is the declared
			// largest fleet, and the declaration is wrong.
			msg += fmt.Sprintf(", above partitions (%d), the declared largest fleet: raise partitions to it", partitions)
		}
		if m := b.Spec.MaxRetriesPerSecond; m != nil && *n > *m {
			// Each pod's share of the cap rounds down to whole retries, so
			// that the fleet never exceeds it in a second.
			msg += fmt.Sprintf("; %d consumers share maxRetriesPerSecond %d: below one retry a second each, so no pod retries", *n, *m)
		}
	}
	return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonAccepted,
		Message: msg, ObservedGeneration: b.Generation}
}
