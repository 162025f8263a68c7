package policygraph_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The layer rules read policies through the small Lookup interface and
// depend on nothing but the API types: the controller-runtime cache behind
// the webhooks and controllers is policyindex's.
func TestPolicygraphDependsOnNoControllerRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(pkg, "k8s.io/client-go") {
			t.Errorf("api/policygraph depends on %s", pkg)
		}
	}
}
