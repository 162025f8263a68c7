package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
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
	if msg := limits.AboveRetryPercentCap(b); msg != "" {
		return notReady(v1.ReasonAbovePlatformCap, "%s", msg)
	}
	if _, err := consumerSelector(b); err != nil {
		return notReady(
			v1.ReasonInvalidSpec,
			"%v; no consumer count is published, so each pod takes the conservative share (the absolute figures over partitions)",
			err,
		)
	}
	if sel, err := consumerSelector(b); err == nil && sel != nil && !shardNamesFit(b.Name) {
		return notReady(v1.ReasonNameTooLongToCount,
			"the name is %d characters: its member shards (%s) would be above the object name limit, so none is published and no pod holds a share;"+
				" rename the budget to at most %d characters", len(b.Name), policyconfig.MemberShardConfigMapName("XX", "NAME"), maxCountedBudgetName)
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

// eventActionEvaluate is the action of every event on a RetryBudget.
const eventActionEvaluate = "Evaluate"

// budgetEvents are the events a budget's status change calls for: Normal
// Accepted when it turns Ready, Warning with the reason when it turns not
// Ready or its reason changes, and one event per change in what its
// consumer count means: counted at last (or again after none), none
// matched, more than partitions. A count that merely moves (a rollout)
// records nothing, so that no event storm follows pod churn.
func budgetEvents(before, after *v1.RetryBudget) []statusEvent {
	var out []statusEvent
	if now, turned := readyTurn(before.Status.Conditions, after.Status.Conditions); turned {
		out = append(out, readyEvent(now, now.Message))
	}
	n, m := after.Status.Consumers, before.Status.Consumers
	if n == nil {
		return out
	}
	switch {
	case *n == 0 && (m == nil || *m != 0):
		out = append(out, statusEvent{corev1.EventTypeWarning, v1.ReasonNoConsumers,
			"consumers.podSelector matches no pod: no pod holds a share of this budget, so none retries on it"})
	case *n > 0 && (m == nil || *m == 0):
		out = append(out, statusEvent{corev1.EventTypeNormal, v1.ReasonConsumersCounted,
			fmt.Sprintf("%d consumers counted and published: each enforces its share of the budget's absolute figures", *n)})
	}
	partitions := *after.Spec.WithDefaults().Partitions
	if *n > partitions && (m == nil || *m <= partitions) {
		out = append(out, statusEvent{corev1.EventTypeWarning, v1.ReasonConsumersAbovePartitions,
			fmt.Sprintf("%d consumers, above partitions (%d), the declared largest fleet: raise partitions to it", *n, partitions)})
	}
	return out
}

// reportStatus completes a budget's status for its patch: the kstatus
// conditions that follow from Ready, and the events its change calls for.
func (r *RetryBudgetReconciler) reportStatus(before, b *v1.RetryBudget) {
	if now := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady); now != nil {
		setProgressConditions(&b.Status.Conditions, *now)
	}
	if r.Recorder == nil {
		return
	}
	for _, e := range budgetEvents(before, b) {
		r.Recorder.Eventf(b, nil, e.Type, e.Reason, eventActionEvaluate, "%s", e.Message)
	}
}
