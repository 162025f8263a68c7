package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// operatorModules are the operator's dependencies, which no application
// importing the runtime may inherit.
var operatorModules = []string{"k8s.io/", "sigs.k8s.io/", "github.com/onsi/ginkgo", "github.com/onsi/gomega", "github.com/twmb/franz-go"}

// An application that imports runtime/retry and the file watcher must not
// inherit the operator's dependencies: its module graph holds no Kubernetes
// client, no controller-runtime, no test framework, no Kafka client and no
// grpc-go (runtime/grpc is a module of its own, for gRPC callers only).
func TestModuleGraphHasNoOperatorDependencies(t *testing.T) {
	// The consumer's own graph, as an application outside the repository sees
	// it: in the workspace (go.work) it would be the union of every module's.
	checkModuleGraph(t, ".", "off", append(operatorModules, "google.golang.org/grpc"))
}

// The gRPC interceptor's module takes grpc-go, and still none of the
// operator's dependencies. Its graph is read in a workspace of it alone,
// with the runtime it requires taken from the work tree: what an
// application that requires it resolves (the repository's go.work would
// give the union of every module's).
func TestGRPCModuleGraphHasNoOperatorDependencies(t *testing.T) {
	checkNestedModuleGraph(t, "../../runtime/grpc", operatorModules)
}

// The OpenTelemetry observer's module takes the OpenTelemetry API, and
// none of the operator's dependencies, nor grpc-go (the OTLP exporters and
// their gRPC are the application's choice, never the observer's).
func TestOTelModuleGraphHasNoOperatorDependencies(t *testing.T) {
	checkNestedModuleGraph(t, "../../runtime/otel", append(operatorModules, "google.golang.org/grpc"))
}

// checkNestedModuleGraph checks the graph of the runtime's nested module in
// dir, read in a workspace of it alone with the runtime taken from the work
// tree.
func checkNestedModuleGraph(t *testing.T, dir string, forbidden []string) {
	t.Helper()
	modDir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "go.work")
	body := "go 1.26.0\n\nuse " + modDir + "\n\nreplace github.com/retryguard/retryguard/runtime => " + filepath.Dir(modDir) + "\n" +
		"\nreplace github.com/retryguard/retryguard/contract => " + filepath.Join(filepath.Dir(filepath.Dir(modDir)), "contract") + "\n"
	if err := os.WriteFile(work, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	checkModuleGraph(t, modDir, work, forbidden)
}

// checkModuleGraph lists the module graph of dir under the workspace
// setting gowork (GOWORK's value) and fails on any forbidden module.
func checkModuleGraph(t *testing.T, dir, gowork string, forbidden []string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+gowork)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all in %s: %v\n%s", dir, err, out)
	}
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
		t.Errorf("the module graph of %s holds %d forbidden modules: %v", dir, len(found), found)
	}
	t.Logf("go list -m all in %s: %d modules", dir, len(lines))
}

// The contract, which the API and the pods share, takes no module at all:
// what it states, every program that reads a policy can import.
func TestContractModuleHasNoDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = "../../contract"
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all in contract: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 1 || got[0] != "github.com/retryguard/retryguard/contract" {
		t.Errorf("the contract's module graph is %v, want the contract alone", got)
	}
}

// No package of the runtime or the contract imports the operator's API
// packages (nor the contract the runtime's): the shared vocabulary lives on
// the reader's side, and api/ imports it.
func TestRuntimeImportsNothingFromTheAPI(t *testing.T) {
	listDeps(t, "../../runtime")
	for _, pkg := range listDeps(t, "../../contract") {
		if strings.HasPrefix(pkg, "github.com/retryguard/retryguard/runtime") {
			t.Errorf("a contract package depends on %s", pkg)
		}
	}
}

// listDeps lists the packages the module in dir and its tests build, and
// fails on any of the operator's.
func listDeps(t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "./...")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps in %s: %v\n%s", dir, err, out)
	}
	pkgs := strings.Fields(string(out))
	for _, pkg := range pkgs {
		if strings.HasPrefix(pkg, "github.com/retryguard/retryguard/api") || strings.HasPrefix(pkg, "github.com/retryguard/retryguard/controllers") ||
			strings.HasPrefix(pkg, "github.com/retryguard/retryguard/webhooks") || strings.HasPrefix(pkg, "github.com/retryguard/retryguard/hack") ||
			strings.HasPrefix(pkg, "github.com/retryguard/retryguard/internal") {
			t.Errorf("a package of %s depends on %s", dir, pkg)
		}
	}
	return pkgs
}
