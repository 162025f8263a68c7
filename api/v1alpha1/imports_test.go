package v1alpha1_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A client that imports the API gets apimachinery and nothing of the
// operator: no controller-runtime, no client-go.
func TestAPIImportsOnlyApimachinery(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(pkg, "k8s.io/client-go") {
			t.Errorf("api/v1alpha1 depends on %s", pkg)
		}
	}
}
