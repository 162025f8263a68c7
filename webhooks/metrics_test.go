package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
)

func budgetRequest(t *testing.T, percent int32) admission.Request {
	t.Helper()
	b := fixtures.Budget("default", "b", percent)
	b.APIVersion, b.Kind = v1.GroupVersion.String(), "RetryBudget"
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		Kind: metav1.GroupVersionKind{Group: v1.GroupVersion.Group, Version: v1.GroupVersion.Version, Kind: "RetryBudget"},
	}}
}

// A webhook registered on a CountDenials server counts each refusal under
// the code it carries, and nothing for an admission.
func TestAdmissionDeniedCountedByCode(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	hook := admission.WithValidator[*v1.RetryBudget](scheme, &RetryBudgetValidator{Limits: policygraph.DefaultLimits()})
	CountDenials(webhook.NewServer(webhook.Options{})).Register("/budget", hook)
	counter := admissionDenied.WithLabelValues(string(codes.BudgetAbovePlatformCap))
	before := testutil.ToFloat64(counter)

	if res := hook.Handle(context.Background(), budgetRequest(t, 5)); !res.Allowed {
		t.Fatalf("a valid budget refused: %v", res.Result)
	}
	if got := testutil.ToFloat64(counter) - before; got != 0 {
		t.Fatalf("an admission counted as %v refusals", got)
	}
	if res := hook.Handle(context.Background(), budgetRequest(t, 50)); res.Allowed {
		t.Fatal("a budget above the platform cap admitted")
	}
	if got := testutil.ToFloat64(counter) - before; got != 1 {
		t.Fatalf("retryguard_admission_denied_total{code=%q} rose by %v, want 1", codes.BudgetAbovePlatformCap, got)
	}
}

// Codes are read from refusal messages, which quote user input: a code
// forged in a value is not counted, and the label set stays bounded.
func TestAdmissionDeniedCodesAreBounded(t *testing.T) {
	outOfRange := admissionDenied.WithLabelValues(string(codes.OutOfRange))
	before := testutil.ToFloat64(outOfRange)
	for i := range 3 * maxDeniedCodes {
		countDenial(admission.Denied(fmt.Sprintf(`spec.x: Invalid value: "ERR_FORGED_%d: x": %s`, i, codes.OutOfRange.Message("no"))))
	}
	if got := testutil.ToFloat64(outOfRange) - before; got != 3*maxDeniedCodes {
		t.Fatalf("%s counted %v times, want %d", codes.OutOfRange, got, 3*maxDeniedCodes)
	}
	for i := range 3 * maxDeniedCodes {
		countDenial(admission.Denied(fmt.Sprintf("ERR_UNQUOTED_%d: x", i)))
	}
	if n := testutil.CollectAndCount(admissionDenied); n > maxDeniedCodes+1 {
		t.Fatalf("%d label values, want at most %d", n, maxDeniedCodes+1)
	}
}
