package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/watch"
)

const samples = "../../../config/samples"

// The drill's policy is what the controller publishes for the sample, read
// back through the file watcher from a kubelet-style ConfigMap volume.
func TestSamplePolicyReachesTheFileWatcher(t *testing.T) {
	want, err := samplePayload(samples, samplePolicy, "drill")
	if err != nil {
		t.Fatal(err)
	}
	if want.Enforcement.Mode != policyconfig.Enforced || want.Budget == nil || want.Budget.RetryPercent != 10 ||
		want.Policy.MaxAttempts != 3 || want.Policy.Backoff.Jitter != "Full" || want.Policy.LeafAttempts != 3 {
		t.Fatalf("the sample's payload is not RETRY-SMS-001's: %+v", want)
	}
	dir := t.TempDir()
	if err := publishFiles(dir, want); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err != nil || !strings.HasPrefix(target, "..") {
		t.Fatalf("..data is not kubelet's symlink: %q %v", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watch.NewFiles(dir)
	w.Namespace = "drill" // the pod's namespace, as POD_NAMESPACE gives it
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok := w.Policy(samplePolicy)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("the watcher serves %+v, %v; want %+v", got, ok, want)
	}
}

// Without its budget the sample is invalid: the controller would publish
// NoRetry, so the drill refuses it rather than run a policy no pod enforces.
func TestSampleWithoutBudgetIsRefused(t *testing.T) {
	dir := t.TempDir()
	copySamples(t, dir, func(s string) string {
		return strings.Replace(s, "  budgetRef:\n    name: telephony-provider\n", "", 1)
	})
	_, err := samplePayload(dir, samplePolicy, "drill")
	if err == nil || !strings.Contains(err.Error(), "ERR_BUDGET_REQUIRED") {
		t.Fatalf("err = %v, want ERR_BUDGET_REQUIRED", err)
	}
}

// copySamples copies config/samples to dir, passing the policy's text through edit.
func copySamples(t *testing.T, dir string, edit func(string) string) {
	t.Helper()
	entries, err := os.ReadDir(samples)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(samples, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		if e.Name() == "policy_v1alpha1_retrypolicy.yaml" {
			if s = edit(s); s == string(data) {
				t.Fatal("the edit changed nothing")
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
