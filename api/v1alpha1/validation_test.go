package v1alpha1_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/api/celrules"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/internal/testenv"
)

func TestValidateRetryPolicySpec(t *testing.T) {
	for _, tc := range policyCases {
		t.Run(tc.Name, func(t *testing.T) {
			p := policyFor(t, tc)
			// What the webhook and lint judge: the Go validators and the CRD's CEL rules run in Go.
			errs := celrules.PolicySpecErrors(context.Background(), p)
			if got, want := verdict(errs), sorted(tc.Want); !slices.Equal(got, want) {
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
		t.Run(tc.Name, func(t *testing.T) {
			b := budgetFor(t, tc)
			errs := v1.ValidateRetryBudgetSpec(&b.Spec, field.NewPath("spec"))
			if got, want := verdict(errs), sorted(tc.Want); !slices.Equal(got, want) {
				t.Fatalf("verdict\n got: %q\nwant: %q\nerrors: %v", got, want, errs)
			}
		})
	}
}

// Every sample must pass the Go validators as it is, undefaulted.
func TestSamplesAreValid(t *testing.T) {
	for _, f := range []string{"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrypolicy_marketing.yaml"} {
		p := testenv.Sample[v1.RetryPolicy](t, f)
		if errs := v1.ValidateRetryPolicySpec(&p.Spec, field.NewPath("spec")); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
		}
	}
	for _, f := range []string{"policy_v1alpha1_retrybudget.yaml", "policy_v1alpha1_retrybudget_marketing.yaml"} {
		b := testenv.Sample[v1.RetryBudget](t, f)
		if errs := v1.ValidateRetryBudgetSpec(&b.Spec, field.NewPath("spec")); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
		}
	}
}

// Garbage in the enums must be an error, never a panic or a silent pass.
func TestValidateRetryPolicySpecRejectsUnknownEnums(t *testing.T) {
	p := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
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

// An absent retryAfter.maxDelay is 3s, or deadline − minRemaining when the
// deadline is too short for 3s: never a default the rules would refuse.
func TestRetryAfterMaxDelayIsDerived(t *testing.T) {
	for _, tc := range []struct {
		deadline, minRemaining, written string
		want                            time.Duration
	}{
		{deadline: "4s", want: 3 * time.Second},
		{deadline: "3s", want: 2500 * time.Millisecond},
		{deadline: "2s", minRemaining: "1s", want: time.Second},
		{deadline: "400ms", want: 0},
		{deadline: "3s", written: "1s", want: time.Second},
	} {
		s := v1.RetryPolicySpec{Deadline: v1.DurationOf(mustParse(tc.deadline))}
		if tc.minRemaining != "" {
			s.MinRemaining = ptr.To(v1.DurationOf(mustParse(tc.minRemaining)))
		}
		if tc.written != "" {
			s.RetryAfter = &v1.RetryAfter{MaxDelay: ptr.To(v1.DurationOf(mustParse(tc.written)))}
		}
		if got := s.RetryAfterMaxDelay(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc, got, tc.want)
		}
		d := s.WithDefaults()
		if got := d.RetryAfterMaxDelay(); got != tc.want {
			t.Errorf("%+v after defaulting: %v, want %v", tc, got, tc.want)
		}
	}
}

func mustParse(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// Errors come sorted by field path, then code, so that one object refused
// twice reads the same, and each carries its code as a value that agrees
// with the code its message starts with.
func TestValidationErrorsAreOrderedAndCoded(t *testing.T) {
	for _, tc := range policyCases {
		errs := v1.ValidateRetryPolicySpec(&policyFor(t, tc).Spec, field.NewPath("spec"))
		var keys []string
		for _, e := range errs {
			keys = append(keys, e.Field+" "+string(v1.CodeOf(e)))
			if c := codeOf(e.Detail); c != "" && string(v1.CodeOf(e)) != c {
				t.Errorf("%s: %s carries code %q, its message says %q", tc.Name, e.Field, v1.CodeOf(e), c)
			}
		}
		if !slices.IsSorted(keys) {
			t.Errorf("%s: errors out of order: %v", tc.Name, keys)
		}
	}
	inc := v1.ValidateRetryPolicySpec(&policyFor(t, policyCase{Mutate: func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 5
		s.Backoff.Jitter = v1.JitterNone
		s.Backoff.Base = dur("0s")
		s.BudgetRef = nil
	}}).Spec, field.NewPath("spec"))
	var got []string
	for _, e := range inc {
		got = append(got, e.Field)
	}
	want := []string{"spec.backoff.base", "spec.backoff.jitter", "spec.budgetRef", "spec.maxAttempts"}
	if !slices.Equal(got, want) {
		t.Errorf("INC-2901 refused in the order %v, want %v (the API server's order)", got, want)
	}
}

// A layer that names no hidden attempts hides none: defaulting makes the
// factor 1, so a policy written before the field existed keeps its product.
func TestHiddenAttemptsDefaultsToOne(t *testing.T) {
	s := v1.RetryPolicySpec{}
	d := s.WithDefaults()
	if d.Layer.HiddenAttempts == nil || *d.Layer.HiddenAttempts != v1.DefaultHiddenAttempts || v1.DefaultHiddenAttempts != 1 {
		t.Fatalf("hiddenAttempts after defaulting = %v, want 1", d.Layer.HiddenAttempts)
	}
	if s.Layer.HiddenAttempts != nil {
		t.Fatal("WithDefaults changed its receiver")
	}
}
