package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/api-reference.md is what the CRDs generate: a change to the types
// (make manifests) must come with make api-reference.
func TestAPIReferenceIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	got, err := generate(filepath.Join(root, crdDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## RetryPolicy", "## RetryBudget", "`spec.maxAttempts`", "ERR_RETRY_LIMIT_EXCEEDED", "`spec.retryPercent`"} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	committed, err := os.ReadFile(filepath.Join(root, out))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, committed) {
		t.Errorf("%s is not what the CRDs generate: run make api-reference", out)
	}
	if strings.Count(string(got), "\n| `") < 40 {
		t.Errorf("only %d fields", strings.Count(string(got), "\n| `"))
	}
}
