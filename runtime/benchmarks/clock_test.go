package benchmarks_test

import (
	"testing"
	"time"
)

// clockSink keeps BenchmarkClockReading's readings where the compiler
// cannot drop them.
var clockSink int64

// BenchmarkClockReading is what one reading of each clock the runtime could
// time an operation with costs on the machine that runs it: time.Since of a
// monotonic reading (one vDSO call: what Do and the metrics take) and
// time.Now (two: the wall clock and the monotonic one). It is the floor
// under metrics-paired (docs/benchmarks.md).
func BenchmarkClockReading(b *testing.B) {
	b.Run("since", func(b *testing.B) {
		for b.Loop() {
			clockSink += int64(time.Since(processStart))
		}
	})
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			clockSink += time.Now().UnixNano()
		}
	})
}
