package crdvalidation_test

import (
	"context"
	"testing"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/internal/testenv"
)

// BenchmarkValidate is the cost of judging one sample object offline (what
// kubectl retryguard lint and each policy reconcile pay): JSON, pruning,
// defaulting, the OpenAPI schema and every CEL rule.
func BenchmarkValidate(b *testing.B) {
	ctx := context.Background()
	p := testenv.Sample[v1.RetryPolicy](b, "policy_v1alpha1_retrypolicy.yaml")
	budget := testenv.Sample[v1.RetryBudget](b, "policy_v1alpha1_retrybudget.yaml")
	if _, err := crdvalidation.Validate(ctx, p); err != nil { // the CRDs are compiled once, outside the loop
		b.Fatal(err)
	}
	b.Run("RetryPolicy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if errs, err := crdvalidation.Validate(ctx, p); err != nil || len(errs) > 0 {
				b.Fatal(errs, err)
			}
		}
	})
	b.Run("RetryBudget", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if errs, err := crdvalidation.Validate(ctx, budget); err != nil || len(errs) > 0 {
				b.Fatal(errs, err)
			}
		}
	})
}
