package controllers

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

func TestEvaluatePolicy(t *testing.T) {
	graphErr := func(c codes.Code) field.ErrorList {
		return field.ErrorList{v1.Invalid(field.NewPath("spec", "x"), 1, c, "because")}
	}
	ok := policygraph.Verdict{Analysis: policygraph.Analysis{Self: policygraph.Layer{MaxAttempts: 3}}}
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

func TestSetProgressConditions(t *testing.T) {
	ready := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: v1.ConditionReady, Status: s, Reason: reason, Message: "m", ObservedGeneration: 3}
	}
	for name, tc := range map[string]struct {
		ready metav1.Condition
		want  string // the one kstatus condition present, "" for none
	}{
		"Published is neither":                      {ready(metav1.ConditionTrue, v1.ReasonPublished), ""},
		"an Accepted budget is neither":             {ready(metav1.ConditionTrue, v1.ReasonAccepted), ""},
		"an invalid spec stalls":                    {ready(metav1.ConditionFalse, v1.ReasonInvalidSpec), v1.ConditionStalled},
		"a cycle stalls":                            {ready(metav1.ConditionFalse, v1.ReasonLayerCycle), v1.ConditionStalled},
		"amplification stalls":                      {ready(metav1.ConditionFalse, v1.ReasonAmplificationExceeded), v1.ConditionStalled},
		"a shared failure domain stalls":            {ready(metav1.ConditionFalse, v1.ReasonSharedFailureDomain), v1.ConditionStalled},
		"a refusing parent stalls":                  {ready(metav1.ConditionFalse, v1.ReasonParentNotPermitted), v1.ConditionStalled},
		"a budget above the platform cap stalls":    {ready(metav1.ConditionFalse, v1.ReasonAbovePlatformCap), v1.ConditionStalled},
		"a name too long to count stalls":           {ready(metav1.ConditionFalse, v1.ReasonNameTooLongToCount), v1.ConditionStalled},
		"a missing parent is waited for":            {ready(metav1.ConditionFalse, v1.ReasonParentNotFound), v1.ConditionReconciling},
		"a missing budget is waited for":            {ready(metav1.ConditionFalse, v1.ReasonBudgetNotFound), v1.ConditionReconciling},
		"a failed publish is retried":               {ready(metav1.ConditionFalse, v1.ReasonPublishFailed), v1.ConditionReconciling},
		"an Unknown Ready is still being worked on": {ready(metav1.ConditionUnknown, "Whatever"), v1.ConditionReconciling},
	} {
		t.Run(name, func(t *testing.T) {
			// Start from the opposite of the answer, so that removal is tested too.
			conds := []metav1.Condition{tc.ready,
				{Type: v1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old"},
				{Type: v1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: "Old"}}
			setProgressConditions(&conds, tc.ready)
			var got []string
			for _, c := range conds {
				if c.Type == v1.ConditionReady {
					continue
				}
				got = append(got, c.Type)
				if c.Status != metav1.ConditionTrue || c.Reason != tc.ready.Reason || c.ObservedGeneration != 3 || c.Message != "m" {
					t.Errorf("%s: %+v, want True with Ready's reason, message and generation", c.Type, c)
				}
			}
			want := []string{}
			if tc.want != "" {
				want = []string{tc.want}
			}
			if len(got) != len(want) || (len(got) == 1 && got[0] != want[0]) {
				t.Fatalf("conditions %v, want %v", got, want)
			}
		})
	}
}

func TestPolicyEvent(t *testing.T) {
	st := func(gen int64, s metav1.ConditionStatus, reason string) *v1.RetryPolicyStatus {
		out := &v1.RetryPolicyStatus{ObservedGeneration: gen, ConfigMapName: "retrypolicy-p"}
		if reason != "" {
			out.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: s, Reason: reason, Message: "msg"}}
		}
		return out
	}
	const T, F = metav1.ConditionTrue, metav1.ConditionFalse
	for name, tc := range map[string]struct {
		before, after *v1.RetryPolicyStatus
		want          string // "Type/Reason", "" for none
	}{
		"first publish":                   {st(0, T, ""), st(1, T, v1.ReasonPublished), "Normal/Published"},
		"a resync that changed nothing":   {st(1, T, v1.ReasonPublished), st(1, T, v1.ReasonPublished), ""},
		"a new generation published":      {st(1, T, v1.ReasonPublished), st(2, T, v1.ReasonPublished), "Normal/Published"},
		"a turn to NoRetry":               {st(1, T, v1.ReasonPublished), st(1, F, v1.ReasonBudgetNotFound), "Warning/BudgetNotFound"},
		"NoRetry from the start":          {st(0, T, ""), st(1, F, v1.ReasonLayerCycle), "Warning/LayerCycle"},
		"a NoRetry that stays":            {st(1, F, v1.ReasonLayerCycle), st(2, F, v1.ReasonLayerCycle), ""},
		"a NoRetry whose reason changes":  {st(1, F, v1.ReasonLayerCycle), st(2, F, v1.ReasonParentNotPermitted), "Warning/ParentNotPermitted"},
		"back to Ready":                   {st(1, F, v1.ReasonBudgetNotFound), st(1, T, v1.ReasonPublished), "Normal/Published"},
		"no Ready yet (an early failure)": {st(0, T, ""), st(0, T, ""), ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := ""
			if e := policyEvent(tc.before, tc.after); e != nil {
				got = e.Type + "/" + e.Reason
				if !strings.Contains(e.Message, "msg") {
					t.Errorf("message %q does not carry Ready's", e.Message)
				}
			}
			if got != tc.want {
				t.Fatalf("event %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBudgetEvents(t *testing.T) {
	budget := func(consumers *int32, s metav1.ConditionStatus, reason string) *v1.RetryBudget {
		b := fixtures.Budget("ns", "b", 10)
		b.Spec.Partitions = ptr.To[int32](4)
		b.Status.Consumers = consumers
		if reason != "" {
			b.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: s, Reason: reason}}
		}
		return b
	}
	n := func(v int32) *int32 { return &v }
	const T, F = metav1.ConditionTrue, metav1.ConditionFalse
	for name, tc := range map[string]struct {
		before, after *v1.RetryBudget
		want          []string
	}{
		"first accepted":            {budget(nil, T, ""), budget(nil, T, v1.ReasonAccepted), []string{"Normal/Accepted"}},
		"a resync":                  {budget(n(2), T, v1.ReasonAccepted), budget(n(2), T, v1.ReasonAccepted), nil},
		"above the platform cap":    {budget(nil, T, v1.ReasonAccepted), budget(nil, F, v1.ReasonAbovePlatformCap), []string{"Warning/AbovePlatformCap"}},
		"first count of none":       {budget(nil, T, v1.ReasonAccepted), budget(n(0), T, v1.ReasonAccepted), []string{"Warning/NoConsumers"}},
		"still none":                {budget(n(0), T, v1.ReasonAccepted), budget(n(0), T, v1.ReasonAccepted), nil},
		"first count":               {budget(nil, T, v1.ReasonAccepted), budget(n(3), T, v1.ReasonAccepted), []string{"Normal/ConsumersCounted"}},
		"counted again after none":  {budget(n(0), T, v1.ReasonAccepted), budget(n(1), T, v1.ReasonAccepted), []string{"Normal/ConsumersCounted"}},
		"a count that moves":        {budget(n(3), T, v1.ReasonAccepted), budget(n(2), T, v1.ReasonAccepted), nil},
		"all gone":                  {budget(n(3), T, v1.ReasonAccepted), budget(n(0), T, v1.ReasonAccepted), []string{"Warning/NoConsumers"}},
		"above partitions":          {budget(n(4), T, v1.ReasonAccepted), budget(n(5), T, v1.ReasonAccepted), []string{"Warning/ConsumersAbovePartitions"}},
		"still above partitions":    {budget(n(5), T, v1.ReasonAccepted), budget(n(6), T, v1.ReasonAccepted), nil},
		"the count lost stays lost": {budget(n(5), T, v1.ReasonAccepted), budget(nil, T, v1.ReasonAccepted), nil},
		"first count, above partitions": {budget(nil, T, ""), budget(n(9), T, v1.ReasonAccepted),
			[]string{"Normal/Accepted", "Normal/ConsumersCounted", "Warning/ConsumersAbovePartitions"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range budgetEvents(tc.before, tc.after) {
				got = append(got, e.Type+"/"+e.Reason)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
		})
	}
}
