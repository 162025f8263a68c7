package controllers

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/runtime/codes"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

func TestEvaluatePolicy(t *testing.T) {
	graphErr := func(c codes.Code) field.ErrorList {
		return field.ErrorList{v1.Invalid(field.NewPath("spec", "x"), 1, c, "because")}
	}
	ok := policygraph.Verdict{Analysis: policygraph.Analysis{Self: policygraph.Layer{Attempts: 3}}}
	for name, tc := range map[string]struct {
		facts  policyFacts
		reason string
	}{
		"everything in place is Published": {policyFacts{BudgetRef: "b", BudgetFound: true, Verdict: ok}, v1.ReasonPublished},
		"no budget reference, one attempt": {policyFacts{Verdict: ok}, v1.ReasonPublished},
		"a missing budget":                 {policyFacts{BudgetRef: "b", Verdict: ok}, v1.ReasonBudgetNotFound},
		"a missing parent": {policyFacts{BudgetRef: "b", BudgetFound: true,
			Verdict: policygraph.Verdict{Analysis: policygraph.Analysis{MissingParent: "job"}}}, v1.ReasonParentNotFound},
		"amplification": {policyFacts{BudgetRef: "b", BudgetFound: true,
			Verdict: policygraph.Verdict{Errors: graphErr(codes.LayerAmplification)}}, v1.ReasonAmplificationExceeded},
		"a cycle beats amplification": {policyFacts{Verdict: policygraph.Verdict{
			Errors: append(graphErr(codes.LayerAmplification), graphErr(codes.LayerCycle)...)}}, v1.ReasonLayerCycle},
		"a parent that does not consent": {policyFacts{BudgetRef: "b", BudgetFound: true,
			Verdict: policygraph.Verdict{Errors: graphErr(codes.ParentNotPermitted)}}, v1.ReasonParentNotPermitted},
		"a refusing parent beats amplification": {policyFacts{Verdict: policygraph.Verdict{
			Errors: append(graphErr(codes.LayerAmplification), graphErr(codes.ParentNotPermitted)...)}}, v1.ReasonParentNotPermitted},
		"a shared pool": {policyFacts{BudgetRef: "b", BudgetFound: true,
			Verdict: policygraph.Verdict{Errors: graphErr(codes.SharedFailureDomainLeak)}}, v1.ReasonSharedFailureDomain},
		"an invalid spec beats everything": {policyFacts{SpecErrors: graphErr(codes.RetryLimitExceeded), BudgetRef: "b",
			Verdict: policygraph.Verdict{Errors: graphErr(codes.LayerCycle)}}, v1.ReasonInvalidSpec},
		"a shared domain beats a missing budget": {policyFacts{BudgetRef: "b",
			Verdict: policygraph.Verdict{Errors: graphErr(codes.SharedFailureDomainLeak)}}, v1.ReasonSharedFailureDomain},
	} {
		t.Run(name, func(t *testing.T) {
			enf, cond := evaluatePolicy(tc.facts, 7)
			if cond.Reason != tc.reason || cond.ObservedGeneration != 7 {
				t.Fatalf("condition %+v, want reason %s", cond, tc.reason)
			}
			ready := tc.reason == v1.ReasonPublished
			if (cond.Status == metav1.ConditionTrue) != ready {
				t.Errorf("status %s for %s", cond.Status, tc.reason)
			}
			wantMode := policyconfig.NoRetry
			if ready {
				wantMode = policyconfig.Enforced
			}
			if enf.Mode != wantMode || (!ready && enf.Reason != tc.reason) {
				t.Errorf("enforcement %+v, want %s/%s", enf, wantMode, tc.reason)
			}
			if !ready && !strings.Contains(cond.Message, "single attempt") {
				t.Errorf("message %q does not say what pods do", cond.Message)
			}
		})
	}
}

func TestPublishFailedCondition(t *testing.T) {
	c := publishFailedCondition(errors.New("boom"), 2)
	if c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonPublishFailed || !strings.Contains(c.Message, "boom") {
		t.Fatalf("%+v", c)
	}
}

func TestEvaluateBudget(t *testing.T) {
	limits := policygraph.DefaultLimits()
	b := fixtures.Budget("ns", "b", 10)
	b.Generation = 4
	if c := evaluateBudget(b, 3, limits); c.Status != metav1.ConditionTrue || c.Reason != v1.ReasonAccepted ||
		c.ObservedGeneration != 4 || !strings.Contains(c.Message, "3 policies") {
		t.Errorf("at the cap: %+v", c)
	}
	b.Spec.RetryPercent = 40
	if c := evaluateBudget(b, 3, limits); c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonAbovePlatformCap {
		t.Errorf("above the cap: %+v", c)
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 100)
	if v := labelValue(long); len(v) > 63 || v == labelValue(long+"b") {
		t.Errorf("labelValue(%d chars) = %q", len(long), v)
	}
	if labelValue("sms-2fa-dispatch") != "sms-2fa-dispatch" {
		t.Error("a short name must be its own label value")
	}
}
