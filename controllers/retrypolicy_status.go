package controllers

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// policyFacts is what one reconcile observed about a policy.
type policyFacts struct {
	// SpecErrors are single-object violations: the CRD's rules
	// (crdvalidation) and a selector that does not parse, possible only
	// where admission was bypassed.
	SpecErrors field.ErrorList
	// BudgetRef names the referenced budget; BudgetFound says whether it exists.
	BudgetRef   string
	BudgetFound bool
	// Verdict is the cross-object rules' answer.
	Verdict policygraph.Verdict
	// HiddenLayers are the retry layers outside Retryguard (status.hiddenLayers);
	// a policy refused for its product names them.
	HiddenLayers []v1.HiddenLayer
}

// graphReasons maps cross-object codes to Ready reasons, in priority order.
var graphReasons = []struct {
	code   codes.Code
	reason string
}{
	{codes.LayerCycle, v1.ReasonLayerCycle},
	{codes.ParentNotPermitted, v1.ReasonParentNotPermitted},
	{codes.BudgetNotShared, v1.ReasonBudgetNotShared},
	{codes.LayerAmplification, v1.ReasonAmplificationExceeded},
	{codes.SharedFailureDomainLeak, v1.ReasonSharedFailureDomain},
}

// evaluatePolicy decides a policy's enforcement and Ready condition from
// what was observed. Anything short of fully safe is NoRetry: pods fail
// closed, never open. A policy whose product is too large names its hidden
// layers at the end of both messages, so that a user sees the
// VirtualService that tipped it over.
func evaluatePolicy(f policyFacts, generation int64) (policyconfig.Enforcement, metav1.Condition) {
	notReady := func(reason, msg string) (policyconfig.Enforcement, metav1.Condition) {
		var hidden string
		if reason == v1.ReasonAmplificationExceeded {
			hidden = hiddenLayersSuffix(f.HiddenLayers)
		}
		return policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: reason, Message: msg + hidden},
			metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason,
				Message: msg + "; pods make a single attempt until this is fixed" + hidden, ObservedGeneration: generation}
	}
	if len(f.SpecErrors) > 0 {
		return notReady(v1.ReasonInvalidSpec, f.SpecErrors.ToAggregate().Error())
	}
	for _, gr := range graphReasons {
		if msgs := detailsWithCode(f.Verdict.Errors, gr.code); msgs != "" {
			return notReady(gr.reason, msgs)
		}
	}
	if parent := f.Verdict.Analysis.MissingParent; parent != "" {
		return notReady(v1.ReasonParentNotFound, fmt.Sprintf("layer.parentRef: RetryPolicy %q does not exist", parent))
	}
	if f.BudgetRef != "" && !f.BudgetFound {
		return notReady(v1.ReasonBudgetNotFound, fmt.Sprintf("budgetRef: RetryBudget %q does not exist", f.BudgetRef))
	}
	return policyconfig.Enforcement{Mode: policyconfig.Enforced},
		metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonPublished,
			Message: fmt.Sprintf("enforced by pods; %d leaf attempts", f.Verdict.Analysis.LeafAttempts()), ObservedGeneration: generation}
}

// publishFailedCondition reports a ConfigMap that could not be written.
func publishFailedCondition(err error, generation int64) metav1.Condition {
	return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonPublishFailed,
		Message: "publishing the ConfigMap failed: " + err.Error(), ObservedGeneration: generation}
}

func detailsWithCode(errs field.ErrorList, c codes.Code) string {
	var msgs []string
	for _, e := range errs {
		if v1.CodeOf(e) == c {
			msgs = append(msgs, e.Field+": "+e.Detail)
		}
	}
	return strings.Join(msgs, "; ")
}

// waitingReasons are the not-Ready reasons the controller resolves by
// itself: a referenced object that may still be created (the controller
// watches for it) and a publish it retries. Every other not-Ready reason is
// a refusal that only a change can lift.
var waitingReasons = []string{v1.ReasonParentNotFound, v1.ReasonBudgetNotFound, v1.ReasonPublishFailed}

// setProgressConditions derives the kstatus conditions from Ready, for
// either kind: Stalled while a refusal holds, Reconciling while the
// controller waits or retries, neither once Ready. kstatus reads Stalled as
// Failed and Reconciling as InProgress, so a NoRetry object is never Current.
func setProgressConditions(conds *[]metav1.Condition, ready metav1.Condition) {
	stalled, reconciling := false, false
	switch {
	case ready.Status == metav1.ConditionTrue:
	case ready.Status == metav1.ConditionFalse && !slices.Contains(waitingReasons, ready.Reason):
		stalled = true
	default:
		reconciling = true
	}
	for _, c := range []struct {
		kind string
		on   bool
	}{{v1.ConditionStalled, stalled}, {v1.ConditionReconciling, reconciling}} {
		if !c.on {
			meta.RemoveStatusCondition(conds, c.kind)
			continue
		}
		meta.SetStatusCondition(conds, metav1.Condition{Type: c.kind, Status: metav1.ConditionTrue, Reason: ready.Reason,
			Message: ready.Message, ObservedGeneration: ready.ObservedGeneration})
	}
}

// statusEvent is an event that a change of status calls for.
type statusEvent struct {
	Type, Reason, Message string
}

// readyTurn returns the Ready condition of after and whether it turned:
// to True from anything else, or to False from anything else or from
// another False reason. The verdict changed only then.
func readyTurn(before, after []metav1.Condition) (*metav1.Condition, bool) {
	now := meta.FindStatusCondition(after, v1.ConditionReady)
	if now == nil {
		return nil, false
	}
	was := meta.FindStatusCondition(before, v1.ConditionReady)
	return now, was == nil || was.Status != now.Status || (now.Status == metav1.ConditionFalse && was.Reason != now.Reason)
}

// readyEvent is the event of a Ready condition: Normal when True, Warning
// otherwise, with its reason.
func readyEvent(c *metav1.Condition, message string) statusEvent {
	if c.Status == metav1.ConditionTrue {
		return statusEvent{corev1.EventTypeNormal, c.Reason, message}
	}
	return statusEvent{corev1.EventTypeWarning, c.Reason, message}
}

// policyEvent is the event a policy's status change calls for, nil when none:
// Normal Published when it turns Ready or publishes a new generation, and
// Warning with the reason when it turns not Ready or its reason changes.
// A reconcile that changes nothing (a resync, a relative's echo) records
// nothing, so that no event storm follows a busy call tree.
func policyEvent(before, after *v1.RetryPolicyStatus) *statusEvent {
	now, turned := readyTurn(before.Conditions, after.Conditions)
	switch {
	case now == nil:
		return nil
	case now.Status == metav1.ConditionTrue && (turned || before.ObservedGeneration != after.ObservedGeneration):
		e := readyEvent(now, fmt.Sprintf("generation %d published in ConfigMap %s: %s", after.ObservedGeneration, after.ConfigMapName, now.Message))
		return &e
	case now.Status == metav1.ConditionFalse && turned:
		e := readyEvent(now, now.Message)
		return &e
	}
	return nil
}
