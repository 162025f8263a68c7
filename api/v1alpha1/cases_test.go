package v1alpha1_test

import (
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/testenv"
)

// The single-object admission table lives in fixtures, so that kubectl
// retryguard lint's parity test runs the very same cases.
type (
	policyCase = fixtures.PolicyCase
	budgetCase = fixtures.BudgetCase
)

var (
	policyCases = fixtures.PolicyCases
	budgetCases = fixtures.BudgetCases
	fe          = fixtures.FieldCode
)

// dur is a Duration as written, so that a test can hold a malformed one.
func dur(s string) *v1.Duration { d := v1.Duration(s); return &d }

// policyFor returns the sample 2FA policy with the case's change applied.
func policyFor(tb testing.TB, tc policyCase) *v1.RetryPolicy {
	p := testenv.Sample[v1.RetryPolicy](tb, "policy_v1alpha1_retrypolicy.yaml")
	tc.Mutate(&p.Spec)
	return p
}

func budgetFor(tb testing.TB, tc budgetCase) *v1.RetryBudget {
	b := sampleBudget(tb)
	tc.Mutate(&b.Spec)
	return b
}

// sampleBudget is the sample RetryBudget as the API server stores it: with
// the UID a published payload carries (a counted budget's count is joined
// to its payloads by it).
func sampleBudget(tb testing.TB) *v1.RetryBudget {
	b := testenv.Sample[v1.RetryBudget](tb, "policy_v1alpha1_retrybudget.yaml")
	b.UID = "7d3c2a61-0b5e-4f7a-9c1d-2e8f6a4b5c90"
	return b
}

// verdict reduces field errors to sorted "field code" lines.
func verdict(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Field+" "+codeOf(e.Detail))
	}
	slices.Sort(out)
	return out
}

var codePattern = regexp.MustCompile(`\bERR_[A-Z_]+\b`)

// codeOf extracts the first ERR_ code of a message, or "" when it has none.
// The API server puts "Invalid value: " before a CEL message.
func codeOf(msg string) string { return codePattern.FindString(msg) }

func sorted(s []string) []string {
	out := slices.Clone(s)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}
