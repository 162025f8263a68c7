package celrules_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/api/celrules"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/runtime/codes"
)

// The CEL rules run in Go refuse what the API server refuses, with the code
// on the field; an admitted policy gives nothing.
func TestPolicyRules(t *testing.T) {
	ctx := context.Background()
	ok := fixtures.Policy("ns", "p", "connector", 2)
	if errs := celrules.PolicySpecErrors(ctx, ok); len(errs) > 0 {
		t.Fatalf("a valid policy is refused: %v", errs)
	}
	keyless := fixtures.Policy("ns", "p", "connector", 2)
	keyless.Spec.Idempotency = nil
	keyless.Spec.RetryOn = &v1.RetryOn{StatusCodes: []int32{}, Errors: []v1.TransportError{v1.ConnectionRefused}}
	keyless.Spec.Hedging = &v1.Hedging{Delay: ptr.To(v1.Duration("50ms")), MaxHedges: 1}
	errs := celrules.PolicySpecErrors(ctx, keyless)
	if len(errs) != 1 || errs[0].Field != "spec.hedging" || !strings.Contains(errs[0].Detail, string(codes.HedgeWithoutIdempotency)) {
		t.Fatalf("a hedging keyless POST: got %v, want one spec.hedging %s", errs, codes.HedgeWithoutIdempotency)
	}
	dup := fixtures.Policy("ns", "p", "connector", 5)
	if errs := celrules.PolicySpecErrors(ctx, dup); len(errs) != 1 {
		t.Fatalf("a refusal both Go and CEL give must appear once: %v", errs)
	}
}
