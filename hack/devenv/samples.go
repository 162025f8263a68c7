package devenv

import (
	"os"

	"sigs.k8s.io/yaml"
)

// Failer is what Sample needs of a test: testing.TB, or ginkgo's GinkgoTB().
type Failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Sample decodes config/samples/<file> strictly into a new T and fails tb
// on any error. The samples are what the README applies, so the admission
// tables and the lint parity test start from them.
func Sample[T any](tb Failer, file string) *T {
	tb.Helper()
	raw, err := os.ReadFile(Path("config", "samples", file))
	if err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	obj := new(T)
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	return obj
}
