package lint_test

import (
	"context"
	"os"
	"testing"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/lint"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
	"github.com/retryguard/retryguard/internal/testenv"
)

// FuzzLint: whatever a file holds, lint answers every document with a
// verdict, and an error only when its own store fails; it never panics.
func FuzzLint(f *testing.F) {
	for _, s := range []string{"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrybudget.yaml"} {
		raw, err := os.ReadFile(testenv.Path("config", "samples", s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		f.Add(append(append(raw, "\n---\n"...), raw...))
	}
	f.Add([]byte("apiVersion: policy.retryguard.io/v1alpha1\nkind: RetryPolicy\nmetadata: {name: a}\nspec: {layer: {name: a, parentRef: {name: a}}}\n"))
	f.Add([]byte("---\n--- \n{}\n---\nkind: [\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		docs := manifest.Split("fuzz.yaml", raw)
		results, err := lint.Run(context.Background(), docs, lint.DefaultOptions())
		if err != nil {
			t.Fatalf("store failed: %v", err)
		}
		if len(results) != len(docs) {
			t.Fatalf("%d results for %d documents", len(results), len(docs))
		}
		for _, r := range results {
			if r.Verdict == "" || (r.Verdict == lint.Refused) != (r.Err != nil) {
				t.Fatalf("document %s: verdict %q with error %v", r.Doc.Where(), r.Verdict, r.Err)
			}
		}
	})
}
