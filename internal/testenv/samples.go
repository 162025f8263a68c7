package testenv

import (
	"os"

	"sigs.k8s.io/yaml"
)

// TB is what the helpers here need of a test or benchmark: testing.TB, or
// ginkgo's GinkgoTB().
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Sample decodes config/samples/<file> strictly into a new T and fails tb
// on any error. The samples are what the README applies, so the admission
// tables and the lint parity test start from them.
func Sample[T any](tb TB, file string) *T {
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
