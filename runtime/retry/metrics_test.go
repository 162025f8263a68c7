package retry

import (
	"context"
	"strings"
	"testing"

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
