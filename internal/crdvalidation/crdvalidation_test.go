package crdvalidation_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/internal/testenv"
)

var codePattern = regexp.MustCompile(`\bERR_[A-Z_]+\b`)

// verdict reduces field errors to sorted "field code" lines, as the
// admission table writes them.
func verdict(errs field.ErrorList) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Field+" "+codePattern.FindString(e.Detail))
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}

// The admission table's verdicts, from the CRDs alone. The same table runs
// against a real API server (api/v1alpha1's CEL suite, and lint's
// TestLintAgreesWithTheAPIServer), so a rule this package evaluated
// differently from the API server would fail there.
func TestTheCRDsGiveTheAdmissionTablesVerdicts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range fixtures.PolicyCases {
		t.Run("policy/"+tc.Name, func(t *testing.T) {
			p := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
			tc.Mutate(&p.Spec)
			errs, err := crdvalidation.Validate(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := verdict(errs), sorted(tc.Want); !slices.Equal(got, want) {
				t.Fatalf("verdict\n got: %q\nwant: %q\nerrors: %v", got, want, errs)
			}
		})
	}
	for _, tc := range fixtures.BudgetCases {
		t.Run("budget/"+tc.Name, func(t *testing.T) {
			b := testenv.Sample[v1.RetryBudget](t, "policy_v1alpha1_retrybudget.yaml")
			tc.Mutate(&b.Spec)
			errs, err := crdvalidation.Validate(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := verdict(errs), sorted(tc.Want); !slices.Equal(got, want) {
				t.Fatalf("verdict\n got: %q\nwant: %q\nerrors: %v", got, want, errs)
			}
		})
	}
}
