package retry

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/retryguard/retryguard/runtime/clock"
)

// The per-policy series count what happened, however an operation ended:
// three first-try successes (the one-atomic path), a success after a 503, a
// permanent 400, and 503 three times. A recompiled policy keeps counting.
func TestMetricsCountEveryOperation(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := smsPolicy()
	src := staticSource{p.Policy.Name: p}
	ex := New(src, WithClock(clock.NewVirtual(epoch)), WithMetrics(NewMetrics(reg)))
	do := func(fail ...error) {
		_ = ex.Do(context.Background(), p.Policy.Name, smsVars, func(_ context.Context, a Attempt) error {
			if a.Number <= len(fail) {
				return fail[a.Number-1]
			}
			return nil
		})
	}
	do()
	do()
	src[p.Policy.Name] = smsPolicy() // a new payload: the policy is compiled again
	do()
	do(Status(503, ""))
	do(Status(400, ""))
	do(Status(503, ""), Status(503, ""), Status(503, ""))
	const want = `
# HELP retryguard_attempts_per_operation Attempts each logical operation made.
# TYPE retryguard_attempts_per_operation histogram
retryguard_attempts_per_operation_bucket{policy="sms-2fa-dispatch",le="1"} 4
retryguard_attempts_per_operation_bucket{policy="sms-2fa-dispatch",le="2"} 5
retryguard_attempts_per_operation_bucket{policy="sms-2fa-dispatch",le="3"} 6
retryguard_attempts_per_operation_bucket{policy="sms-2fa-dispatch",le="4"} 6
retryguard_attempts_per_operation_bucket{policy="sms-2fa-dispatch",le="5"} 6
retryguard_attempts_per_operation_bucket{policy="sms-2fa-dispatch",le="+Inf"} 6
retryguard_attempts_per_operation_sum{policy="sms-2fa-dispatch"} 9
retryguard_attempts_per_operation_count{policy="sms-2fa-dispatch"} 6
# HELP retryguard_attempts_total Attempts by classification of their outcome.
# TYPE retryguard_attempts_total counter
retryguard_attempts_total{class="ambiguous",policy="sms-2fa-dispatch"} 0
retryguard_attempts_total{class="permanent",policy="sms-2fa-dispatch"} 1
retryguard_attempts_total{class="success",policy="sms-2fa-dispatch"} 4
retryguard_attempts_total{class="transient",policy="sms-2fa-dispatch"} 4
retryguard_attempts_total{class="unrecognized",policy="sms-2fa-dispatch"} 0
# HELP retryguard_operations_total Logical operations by final state.
# TYPE retryguard_operations_total counter
retryguard_operations_total{policy="sms-2fa-dispatch",state="BUDGET_EXHAUSTED"} 0
retryguard_operations_total{policy="sms-2fa-dispatch",state="DISPATCHED"} 4
retryguard_operations_total{policy="sms-2fa-dispatch",state="TERMINAL_EXHAUSTED"} 2
retryguard_operations_total{policy="sms-2fa-dispatch",state="UNKNOWN_OUTCOME"} 0
# HELP retryguard_state_transitions_total Lifecycle transitions by the state entered.
# TYPE retryguard_state_transitions_total counter
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="ATTEMPTING"} 9
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="BACKOFF_WAIT"} 3
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="BUDGET_EXHAUSTED"} 0
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="DISPATCHED"} 4
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="SUBMITTED"} 6
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="TERMINAL_EXHAUSTED"} 2
retryguard_state_transitions_total{policy="sms-2fa-dispatch",to="UNKNOWN_OUTCOME"} 0
`
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, mf := range families {
		switch mf.GetName() {
		case "retryguard_attempts_per_operation", "retryguard_attempts_total", "retryguard_operations_total", "retryguard_state_transitions_total":
			if _, err := expfmt.MetricFamilyToText(&got, mf); err != nil {
				t.Fatal(err)
			}
		case "retryguard_retries_denied_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); len(mf.GetMetric()) != 2 || v != 1 {
				t.Errorf("retries denied: %v", mf)
			}
		}
	}
	if got.String() != strings.TrimPrefix(want, "\n") {
		t.Errorf("metrics:\n%s\nwant:\n%s", got.String(), want)
	}
}

// Operation latency is measured in seconds from the operation's start to its
// final state, backoff included, so that the latency SLA (p95 <= 1,200 ms) can
// be watched from the share of operations above the 1.2 s bucket; and each
// backoff wait is recorded. On the virtual clock every duration is exact: the
// attempts take the time the operation sleeps, and the jitter draws its largest
// delay (the spec's 0-200 ms, then 0-400 ms).
func TestMetricsMeasureOperationAndBackoffSeconds(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := smsPolicy()
	clk := clock.NewVirtual(epoch)
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clk), WithMetrics(NewMetrics(reg)), WithRand(func(n int64) int64 { return n - 1 }))
	do := func(took time.Duration, fail ...error) {
		_ = ex.Do(context.Background(), p.Policy.Name, smsVars, func(ctx context.Context, a Attempt) error {
			_ = clk.Sleep(ctx, took)
			if a.Number <= len(fail) {
				return fail[a.Number-1]
			}
			return nil
		})
	}
	do(300 * time.Millisecond)                                                  // DISPATCHED in 0.3 s
	do(100*time.Millisecond, Status(503, ""))                                   // 0.1 + 0.2 + 0.1 s
	do(500*time.Millisecond, Status(503, ""), Status(503, ""), Status(503, "")) // 0.5 + 0.2 + 0.5 + 0.4 + 0.5 s
	do(10*time.Millisecond, Status(400, ""))                                    // 10 ms, permanent

	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := func(name string, labels map[string]string) (buckets map[float64]uint64, count uint64, sum float64) {
		for _, mf := range gathered {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
						continue next
					}
				}
				buckets = map[float64]uint64{}
				for _, b := range m.GetHistogram().GetBucket() {
					buckets[b.GetUpperBound()] = b.GetCumulativeCount()
				}
				return buckets, m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return nil, 0, 0
	}
	const ns = 1e-9
	ok, n, sum := hist("retryguard_operation_duration_seconds", map[string]string{"state": "DISPATCHED"})
	if n != 2 || ok[0.25] != 0 || ok[0.5] != 2 || ok[1.2] != 2 || math.Abs(sum-(0.3+0.4-ns)) > 1e-6 {
		t.Errorf("DISPATCHED: count %d, sum %v, buckets %v; want 2 within 0.5 s, 0.7 s in all", n, sum, ok)
	}
	failed, n, sum := hist("retryguard_operation_duration_seconds", map[string]string{"state": "TERMINAL_EXHAUSTED"})
	if n != 2 || failed[0.01] != 1 || failed[1.2] != 1 || failed[2.5] != 2 || math.Abs(sum-(0.01+2.1-2*ns)) > 1e-6 {
		t.Errorf("TERMINAL_EXHAUSTED: count %d, sum %v, buckets %v; want one in 10 ms and one above the SLA's 1.2 s", n, sum, failed)
	}
	if _, n, _ := hist("retryguard_operation_duration_seconds", map[string]string{"state": "UNKNOWN_OUTCOME"}); n != 0 {
		t.Errorf("UNKNOWN_OUTCOME: %d operations", n)
	}
	waits, n, sum := hist("retryguard_backoff_seconds", nil)
	if n != 3 || waits[0.1] != 0 || waits[0.2] != 2 || waits[0.4] != 3 || math.Abs(sum-(0.8-3*ns)) > 1e-6 {
		t.Errorf("backoff: count %d, sum %v, buckets %v; want 0.2, 0.2 and 0.4 s", n, sum, waits)
	}
}

// A first-try success within the first bound costs one atomic add to a
// packed word, moved into the histogram every packedFlush: while
// operations finish on several goroutines, every reading of the histogram
// is at least the one before, and once they are done it holds each
// duration exactly, in its bucket and in the sum (-race).
func TestThePackedDurationsNeverGoDownAndLoseNothing(t *testing.T) {
	var h durations
	const goroutines, each = 4, 3 * packedFlush
	durationOf := func(g, i int) time.Duration {
		if i%97 == 0 {
			return durationBounds[1] // past the first bound: the plain path
		}
		return time.Duration(g*each+i) % (durationBounds[0] + 1)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				h.observeFast(durationOf(g, i))
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	var last [len(durationBounds) + 1]uint64
	var lastSum uint64
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		counts, sum := h.snapshot()
		for i := range counts {
			if counts[i] < last[i] {
				t.Fatalf("bucket %d went down: %d -> %d", i, last[i], counts[i])
			}
		}
		if sum < lastSum {
			t.Fatalf("the sum went down: %d -> %d", lastSum, sum)
		}
		last, lastSum = counts, sum
	}
	var want [len(durationBounds) + 1]uint64
	var wantSum uint64
	for g := range goroutines {
		for i := range each {
			d := durationOf(g, i)
			if d <= durationBounds[0] {
				want[0]++
			} else {
				want[1]++
			}
			wantSum += uint64(d)
		}
	}
	if counts, sum := h.snapshot(); counts != want || sum != wantSum {
		t.Fatalf("after %d durations: counts %v, sum %d; want %v, %d", goroutines*each, counts, sum, want, wantSum)
	}
}
