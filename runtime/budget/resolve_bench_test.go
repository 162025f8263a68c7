package budget

import (
	"testing"
	"time"
)

// BenchmarkRegistryResolve is the registry's work on every operation: the
// executor resolves its policy's budget each time, and a payload that
// changed nothing (here a counted fleet budget with an allowance) must be
// found again without a lock or a copy
// (docs/benchmarks.md, the budget registry on every operation).
func BenchmarkRegistryResolve(b *testing.B) {
	r := NewRegistry(nil, WithPod(thisPod))
	p := counted(1, 4, time.Now(), thisPod)
	if _, err := r.Resolve("shop", p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resolve("shop", p); err != nil {
			b.Fatal(err)
		}
	}
}
