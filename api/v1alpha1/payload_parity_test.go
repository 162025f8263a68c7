package v1alpha1_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/testenv"
)

// unpublished are the fields the payload does not carry, each with how to
// clear it. The runtime never acts on them, so a pod has nothing to judge:
// layer.hiddenAttempts reaches a pod only through leafAttempts, which the
// controller computes from admitted specs; layer.allowedChildren is a
// parent's consent, which only admission and the controller judge.
var unpublished = map[string]func(*v1.RetryPolicySpec){
	"spec.layer.hiddenAttempts":                      func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = nil },
	"spec.layer.allowedChildren.namespaces.selector": func(s *v1.RetryPolicySpec) { s.Layer.AllowedChildren = nil },
}

// onlyUnpublished reports whether every error a case wants is on a field the
// payload does not carry.
func onlyUnpublished(want []string) bool {
	for _, w := range want {
		path, _, _ := strings.Cut(w, " ")
		if unpublished[path] == nil {
			return false
		}
	}
	return len(want) > 0
}

// A pod must be at least as strict as admission: every spec the API refuses
// (the parity table above), published as an Enforced payload, is refused by
// policyconfig.Parse; every spec it accepts parses. The payload is encoded
// with encoding/json, not Marshal, so that nothing but Parse judges it.
func TestParseIsAsStrictAsAdmission(t *testing.T) {
	enforced := policyconfig.Enforcement{Mode: policyconfig.Enforced}
	sample := sampleBudget(t)
	for _, tc := range policyCases {
		t.Run("policy/"+tc.Name, func(t *testing.T) {
			p := policyFor(t, tc)
			p.Namespace, p.Generation = "auth", 1
			var budget *v1.RetryBudget
			if p.Spec.BudgetRef != nil {
				budget = sample
			}
			payload := controllers.BuildPayload(p, budget, int64(p.Spec.MaxAttempts), enforced)
			if onlyUnpublished(tc.Want) {
				// Refused for a field the payload lacks: the payload must hold
				// no trace of it, or Parse would have something to judge.
				cleared := p.DeepCopy()
				for _, w := range tc.Want {
					path, _, _ := strings.Cut(w, " ")
					unpublished[path](&cleared.Spec)
				}
				want := controllers.BuildPayload(cleared, budget, int64(p.Spec.MaxAttempts), enforced)
				if !reflect.DeepEqual(payload, want) {
					t.Fatalf("the payload carries a field it is said not to:\n%+v\nwant\n%+v", payload, want)
				}
				return
			}
			expectParse(t, payload, tc.Want)
		})
	}
	samplePolicy := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	samplePolicy.Namespace, samplePolicy.Generation = "auth", 1
	for _, tc := range budgetCases {
		t.Run("budget/"+tc.Name, func(t *testing.T) {
			b := budgetFor(t, tc)
			payload := controllers.BuildPayload(samplePolicy, b, 3, enforced)
			expectParse(t, payload, tc.Want)
		})
	}
}

// expectParse holds Parse to admission's verdict, want (the table's, which
// the CEL suite holds the API server to).
func expectParse(t *testing.T, payload *policyconfig.Payload, want []string) {
	t.Helper()
	accept := len(want) == 0
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	_, err = policyconfig.Parse(raw)
	switch {
	case accept && err != nil:
		t.Fatalf("admission accepts it, Parse refuses it: %v", err)
	case !accept && err == nil:
		t.Fatalf("admission refuses it (%q), Parse accepts it:\n%s", want, raw)
	case err != nil && !errors.Is(err, policyconfig.ErrInvalidPayload):
		t.Fatalf("not an ErrInvalidPayload: %v", err)
	}
}
