package controllers

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/codes"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// policyFacts is what one reconcile observed about a policy.
type policyFacts struct {
	// SpecErrors are single-object violations (possible only where the CRD
	// lacks its CEL).
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
