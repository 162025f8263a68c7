package policytest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/retryguard/retryguard/internal/testenv"
)

// A test file is input from a repository: whatever it holds, Load and Run
// answer with tests or an error, never a panic.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{testenv.Path("config", "samples", FileName), testenv.Path("hack", "demo", FileName)} {
		raw, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte("apiVersion: retryguard.io/v1alpha1\nkind: Test\nmetadata: {name: t}\nmanifests: [p.yaml]\nlimits: {maxLeafAttempts: -1}\n" +
		"expect:\n- {kind: RetryPolicy, name: x, verdict: refused, codes: []}\n"))
	f.Add([]byte("--- {a: 1}\n---\n# only a comment\n"))
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		tests, err := Load(path)
		if err != nil {
			return
		}
		for _, tc := range tests {
			// Seeds from the repository name manifests elsewhere: an error then.
			if res, err := Run(context.Background(), tc); err == nil && len(res.Results) == 0 {
				t.Fatalf("a test with expectations gave no result: %+v", tc)
			}
		}
	})
}
