package v1alpha1_test

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/codes"
)

// A refusal reads the same from CEL and from the webhooks: markers cannot
// import the Go validators' messages, so every coded message the Go
// validators give on the admission table must be, word for word, the message
// of one of the CRD's rules. A message reworded on one side only fails here.
func TestGoMessagesAreTheCRDMessages(t *testing.T) {
	crd := map[string]bool{}
	for _, plural := range []string{"retrypolicies", "retrybudgets"} {
		walk(plural, loadCRDSchema(t, plural), func(_ string, s *apiextensionsv1.JSONSchemaProps) {
			for _, r := range s.XValidations {
				crd[r.Message] = true
			}
		})
	}
	seen := map[string]bool{}
	check := func(name string, errs field.ErrorList) {
		for _, e := range errs {
			c := v1.CodeOf(e)
			// A selector's parse error and a duration's syntax carry text
			// from elsewhere (apimachinery's parser, the Duration type's
			// rule, held by TestDurationRefusesWhatTheCRDRefuses).
			if c == "" || c == codes.InvalidSelector || c == codes.InvalidDuration {
				continue
			}
			seen[e.Detail] = true
			if !crd[e.Detail] {
				t.Errorf("%s: the Go validator says %q at %s, which no CRD rule says", name, e.Detail, e.Field)
			}
		}
	}
	for _, tc := range policyCases {
		check(tc.Name, v1.ValidateRetryPolicySpec(&policyFor(t, tc).Spec, field.NewPath("spec")))
	}
	for _, tc := range budgetCases {
		check(tc.Name, v1.ValidateRetryBudgetSpec(&budgetFor(t, tc).Spec, field.NewPath("spec")))
	}
	// The table reaches most rules; fewer would mean it no longer does.
	if len(seen) < 15 {
		t.Fatalf("the admission table gave only %d distinct coded messages: %s", len(seen), strings.Join(keys(seen), "; "))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
