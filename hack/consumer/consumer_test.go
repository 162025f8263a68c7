package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// An application that imports runtime/retry and the file watcher must not
// inherit the operator's dependencies: its module graph holds no Kubernetes
// client, no controller-runtime, no test framework and no Kafka client.
func TestModuleGraphHasNoOperatorDependencies(t *testing.T) {
	// The consumer's own graph, as an application outside the repository sees
	// it: in the workspace (go.work) it would be the union of every module's.
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	forbidden := []string{"k8s.io/", "sigs.k8s.io/", "github.com/onsi/ginkgo", "github.com/onsi/gomega", "github.com/twmb/franz-go"}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var found []string
	for _, line := range lines {
		mod := strings.Fields(line)[0]
		for _, f := range forbidden {
			if strings.HasPrefix(mod, f) {
				found = append(found, mod)
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("the consumer's module graph holds %d forbidden modules: %v", len(found), found)
	}
	t.Logf("go list -m all: %d modules", len(lines))
}

// No package of the runtime module imports the operator's API packages: the
// shared vocabulary lives on the reader's side, and api/ imports it.
func TestRuntimeImportsNothingFromTheAPI(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-test", "./...")
	cmd.Dir = "../../runtime"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/retryguard/retryguard/api") || strings.HasPrefix(pkg, "github.com/retryguard/retryguard/controllers") ||
			strings.HasPrefix(pkg, "github.com/retryguard/retryguard/webhooks") || strings.HasPrefix(pkg, "github.com/retryguard/retryguard/hack") {
			t.Errorf("a runtime package depends on %s", pkg)
		}
	}
}
