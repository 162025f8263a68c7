package v1alpha1_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

func TestValidateRetryPolicySpec(t *testing.T) {
	for _, tc := range policyCases {
		t.Run(tc.name, func(t *testing.T) {
			p := policyFor(t, tc)
			errs := v1.ValidateRetryPolicySpec(&p.Spec, field.NewPath("spec"))
			if got, want := verdict(errs), sorted(tc.want); !slices.Equal(got, want) {
				t.Fatalf("verdict\n got: %q\nwant: %q\nerrors: %v", got, want, errs)
			}
			for _, e := range errs {
				if codeOf(e.Detail) != "" && !strings.Contains(e.Error(), e.Field) {
					t.Errorf("message %q does not name its field %s", e.Error(), e.Field)
				}
			}
		})
	}
}

func TestValidateRetryBudgetSpec(t *testing.T) {
	for _, tc := range budgetCases {
		t.Run(tc.name, func(t *testing.T) {
			b := budgetFor(t, tc)
			errs := v1.ValidateRetryBudgetSpec(&b.Spec, field.NewPath("spec"))
			if got, want := verdict(errs), sorted(tc.want); !slices.Equal(got, want) {
				t.Fatalf("verdict\n got: %q\nwant: %q\nerrors: %v", got, want, errs)
			}
		})
	}
}

// Every sample must pass the Go validators as it is, undefaulted.
func TestSamplesAreValid(t *testing.T) {
	for _, f := range []string{"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrypolicy_marketing.yaml"} {
		p := loadSample[v1.RetryPolicy](t, f)
		if errs := v1.ValidateRetryPolicySpec(&p.Spec, field.NewPath("spec")); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
		}
	}
	for _, f := range []string{"policy_v1alpha1_retrybudget.yaml", "policy_v1alpha1_retrybudget_marketing.yaml"} {
		b := loadSample[v1.RetryBudget](t, f)
		if errs := v1.ValidateRetryBudgetSpec(&b.Spec, field.NewPath("spec")); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
		}
	}
}

// Garbage in the enums must be an error, never a panic or a silent pass.
func TestValidateRetryPolicySpecRejectsUnknownEnums(t *testing.T) {
	p := loadSample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	p.Spec.Backoff.Jitter = "Sometimes"
	p.Spec.RetryOn.Errors = append(p.Spec.RetryOn.Errors, "Gremlins")
	crit := v1.Criticality("Meh")
	p.Spec.Criticality = &crit
	errs := v1.ValidateRetryPolicySpec(&p.Spec, field.NewPath("spec"))
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = e.Type == field.ErrorTypeNotSupported
	}
	for _, f := range []string{"spec.backoff.jitter", "spec.retryOn.errors[3]", "spec.criticality"} {
		if !got[f] {
			t.Errorf("no NotSupported error for %s in %v", f, errs)
		}
	}
}
