package crdvalidation_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/internal/testenv"
)

// FuzzValidateRetryPolicy feeds arbitrary JSON specs to the CRD's rules as
// the API server evaluates them. They must never panic nor fail to judge,
// and whatever they accept must hold the invariants the runtime relies on.
func FuzzValidateRetryPolicy(f *testing.F) {
	for _, tc := range fixtures.PolicyCases {
		p := testenv.Sample[v1.RetryPolicy](f, "policy_v1alpha1_retrypolicy.yaml")
		tc.Mutate(&p.Spec)
		raw, _ := json.Marshal(p.Spec)
		f.Add(raw)
	}
	f.Add([]byte(`{"maxAttempts":3,"backoff":{"jitter":"Full","base":"-1s"},"deadline":"1ns"}`))
	f.Add([]byte(`{"retryOn":{"statusCodes":[-1,2147483647]},"fallback":{"channels":[{"endpoint":"https://%zz"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec v1.RetryPolicySpec
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		p := &v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "ns"}, Spec: spec}
		errs, err := crdvalidation.Validate(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) > 0 {
			return
		}
		s := spec.WithDefaults()
		switch {
		case s.MaxAttempts < 1 || s.MaxAttempts > 3:
			t.Fatalf("accepted maxAttempts %d", s.MaxAttempts)
		case *s.Backoff.Jitter == v1.JitterNone || s.Backoff.Base.Duration() <= 0:
			t.Fatalf("accepted an immediate or unjittered retry: %+v", s.Backoff)
		case s.Backoff.Cap.Duration() < s.Backoff.Base.Duration():
			t.Fatalf("accepted cap < base: %+v", s.Backoff)
		case s.MaxAttempts > 1 && s.BudgetRef == nil:
			t.Fatal("accepted retries without a budget")
		case s.Deadline.Duration() <= 0:
			t.Fatal("accepted a non-positive deadline")
		}
		for _, c := range s.RetryOn.StatusCodes {
			if !httprules.IsRetryableStatus(c) {
				t.Fatalf("accepted retry on %d", c)
			}
		}
		if s.Fallback != nil {
			for _, ch := range s.Fallback.Channels {
				if !httprules.IsSecureEndpoint(ch.Endpoint) || ch.Verified == nil || !*ch.Verified {
					t.Fatalf("accepted fallback %+v", ch)
				}
			}
		}
	})
}

// FuzzValidateRetryBudget: never a panic, and accepted budgets are in range.
func FuzzValidateRetryBudget(f *testing.F) {
	raw, _ := os.ReadFile(testenv.Path("config", "samples", "policy_v1alpha1_retrybudget.yaml"))
	f.Add(raw)
	f.Add([]byte(`{"retryPercent":10,"window":"60s","maxTokens":10,"partitions":3}`))
	f.Add([]byte(`{"retryPercent":0,"window":"-1s","maxTokens":-5,"partitions":0}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec v1.RetryBudgetSpec
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		b := &v1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "ns"}, Spec: spec}
		errs, err := crdvalidation.Validate(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) > 0 {
			return
		}
		s := spec.WithDefaults()
		if s.RetryPercent < 1 || s.RetryPercent > 100 || *s.MaxTokens < 1 || *s.Partitions < 1 || s.Window.Duration() <= 0 {
			t.Fatalf("accepted %+v", s)
		}
	})
}
