package crdvalidation_test

import (
	"context"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

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

// Every sample passes the CRD's rules as it is, undefaulted.
func TestSamplesAreValid(t *testing.T) {
	ctx := context.Background()
	for _, f := range []string{"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrypolicy_marketing.yaml"} {
		if errs, err := crdvalidation.Validate(ctx, testenv.Sample[v1.RetryPolicy](t, f)); err != nil || len(errs) > 0 {
			t.Errorf("%s: %v %v", f, errs, err)
		}
	}
	for _, f := range []string{"policy_v1alpha1_retrybudget.yaml", "policy_v1alpha1_retrybudget_marketing.yaml"} {
		if errs, err := crdvalidation.Validate(ctx, testenv.Sample[v1.RetryBudget](t, f)); err != nil || len(errs) > 0 {
			t.Errorf("%s: %v %v", f, errs, err)
		}
	}
}

// Garbage in the enums is an error naming the field, never a panic or a
// silent pass; the schema's enum refuses it, so the CEL rules are not run
// on it, and the answer says so.
func TestUnknownEnumsAreRefused(t *testing.T) {
	p := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	p.Spec.Backoff.Jitter = ptr.To[v1.JitterMode]("Sometimes")
	p.Spec.RetryOn.Errors = append(p.Spec.RetryOn.Errors, "Gremlins")
	crit := v1.Criticality("Meh")
	p.Spec.Criticality = &crit
	errs, err := crdvalidation.Validate(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = e.Type == field.ErrorTypeNotSupported
	}
	for _, f := range []string{"spec.backoff.jitter", "spec.retryOn.errors[3]", "spec.criticality"} {
		if !got[f] {
			t.Errorf("no NotSupported error for %s in %v", f, errs)
		}
	}
	if last := errs[len(errs)-1]; last.Field != "<nil>" || !strings.Contains(last.Detail, "some validation rules were not checked") {
		t.Errorf("the answer does not say the CEL rules were skipped: %v", errs)
	}
}

// Admit returns the object as the API server would store it: with the
// schema's defaults, and without the status a write of the main resource
// cannot set.
func TestAdmitDefaultsAndDropsStatus(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.retryguard.io/v1alpha1", "kind": "RetryBudget",
		"metadata": map[string]any{"name": "b", "namespace": "ns"},
		"spec":     map[string]any{"retryPercent": int64(10), "unknown": true},
		"status":   map[string]any{"policyCount": int64(7)},
	}}
	errs, err := crdvalidation.Admit(context.Background(), u, nil)
	if err != nil || len(errs) > 0 {
		t.Fatalf("%v %v", errs, err)
	}
	want := map[string]any{"retryPercent": int64(10), "window": "60s", "maxTokens": int64(10), "minRetriesPerSecond": int64(0),
		"partitions": int64(1)}
	if spec := u.Object["spec"]; !reflect.DeepEqual(spec, want) {
		t.Errorf("spec %v, want %v", spec, want)
	}
	if _, ok := u.Object["status"]; ok {
		t.Errorf("status kept: %v", u.Object["status"])
	}
	if _, err := crdvalidation.Admit(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap"}}, nil); err == nil {
		t.Error("a kind without a CRD judged")
	}
}
