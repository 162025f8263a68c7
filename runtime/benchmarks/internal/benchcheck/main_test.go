package main

import (
	"strings"
	"testing"
)

const out = `goos: linux
BenchmarkDoSuccess/failsafe-paired  6063  388346 ns/op  -410 delta-ns/op  80.00 ours-ns/op  440.6 peer-ns/op  0.1959 ratio  118 B/op  0 allocs/op
BenchmarkDoSuccess/failsafe-paired  6063  388346 ns/op  -410 delta-ns/op  80.00 ours-ns/op  440.6 peer-ns/op  0.2100 ratio  118 B/op  0 allocs/op
BenchmarkDoSuccess/failsafe-paired  6063  388346 ns/op  -410 delta-ns/op  80.00 ours-ns/op  440.6 peer-ns/op  0.1900 ratio  118 B/op  0 allocs/op
BenchmarkBudget/try-retry-paired-2  3510  176838 ns/op  -5.0 delta-ns/op  82.23 ours-ns/op  87.27 peer-ns/op  1.0300 ratio
BenchmarkBudget/try-retry-paired-2  3510  176838 ns/op  -5.0 delta-ns/op  82.23 ours-ns/op  87.27 peer-ns/op  1.0400 ratio
BenchmarkBudget/try-retry-paired-2  3510  176838 ns/op  -5.0 delta-ns/op  82.23 ours-ns/op  87.27 peer-ns/op  1.0200 ratio
BenchmarkUnaryPaired-2  4846  461876 ns/op  97745 bare-ns/call  1.080 cpu-ratio
BenchmarkUnaryPaired-2  4846  461876 ns/op  97745 bare-ns/call  1.090 cpu-ratio
BenchmarkUnaryPaired-2  4846  461876 ns/op  97745 bare-ns/call  1.120 cpu-ratio
BenchmarkProxyPaired  100  109581677 ns/op  0.3045 governed/bare-added-p99  2.178 governed/bare-req/s
BenchmarkProxyPaired  100  109581677 ns/op  0.2746 governed/bare-added-p99  0.97 governed/bare-req/s
BenchmarkProxyPaired  100  109581677 ns/op  0.4288 governed/bare-added-p99  2.118 governed/bare-req/s
PASS
`

// A median within its goal passes; one past it by more than half the
// runs' spread fails; a goal with no figure fails.
func TestTheMedianIsJudgedAgainstTheGoalPlusTheNoise(t *testing.T) {
	figures, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var w strings.Builder
	if n := check(figures, &w); n != 3 {
		t.Fatalf("%d goals failed, want 3 (try-retry past its goal, metrics and success-path without figures):\n%s", n, w.String())
	}
	for _, line := range []string{
		"ok   BenchmarkDoSuccess/failsafe-paired ratio: median 0.196 ± 0.01 over 3 runs",
		"FAIL BenchmarkBudget/try-retry-paired ratio: median 1.03 ± 0.01 over 3 runs",
		"FAIL BenchmarkDoSuccess/metrics-paired delta-ns/op: no figure",
		"ok   BenchmarkProxyPaired governed/bare-added-p99: median 0.304 ± 0.077 over 3 runs, goal <= 0.5",
		"ok   BenchmarkProxyPaired governed/bare-req/s: median 2.12 ± 0.6 over 3 runs, goal >= 1",
	} {
		if !strings.Contains(w.String(), line) {
			t.Errorf("the report has no line %q:\n%s", line, w.String())
		}
	}
	// A median past the goal by less than the noise is within the run's noise.
	if _, _, ok := verdict(goal{bound: 0.20}, []float64{0.19, 0.205, 0.23}); !ok {
		t.Error("a median of 0.205 with a noise of 0.02 failed a goal of 0.20")
	}
	// A lower bound: a median below it by more than the noise fails.
	if _, _, ok := verdict(goal{bound: 1, atLeast: true}, []float64{0.97, 0.98, 0.99}); ok {
		t.Error("a median of 0.98 with a noise of 0.01 met a goal of at least 1")
	}
	if _, _, ok := verdict(goal{bound: 1, atLeast: true}, []float64{0.9, 0.99, 1.2}); !ok {
		t.Error("a median of 0.99 with a noise of 0.15 failed a goal of at least 1")
	}
}
