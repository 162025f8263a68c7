package retry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/runtime/budget"
)

// Metrics are the runtime's Prometheus metrics. Labels are bounded: policy
// and budget names come from published configuration, never from requests,
// and the other labels are fixed sets. A nil *Metrics records nothing.
type Metrics struct {
	operations  *prometheus.CounterVec
	attempts    *prometheus.CounterVec
	denied      *prometheus.CounterVec
	transitions *prometheus.CounterVec
	perOp       *prometheus.HistogramVec
	tokens      *prometheus.GaugeVec
	conflicts   *prometheus.CounterVec
	Dropped     prometheus.Counter
}

// NewMetrics registers the runtime's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_operations_total",
			Help: "Logical operations by final state."}, []string{"policy", "state"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_attempts_total",
			Help: "Attempts by classification of their outcome."}, []string{"policy", "class"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_retries_denied_total",
			Help: "Retries not made, by reason (budget, deadline, deadline_at_start, retry_after, retry_after_unparseable, permanent, ambiguous, not_replay_safe, exhausted, not_enforced, cancelled)."}, []string{"policy", "reason"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_state_transitions_total",
			Help: "Lifecycle transitions by the state entered."}, []string{"policy", "to"}),
		perOp: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "retryguard_attempts_per_operation",
			Help: "Attempts each logical operation made.", Buckets: []float64{1, 2, 3, 4, 5}}, []string{"policy"}),
		tokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "retryguard_budget_tokens",
			Help: "Tokens in each retry budget, sampled when a policy using it is compiled and on every retry decision."}, []string{"budget"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_budget_conflicts_total",
			Help: "Payloads whose budget figures were not applied: an older generation, or other figures under the same one."}, []string{"budget"}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "retryguard_events_dropped_total",
			Help: "Lifecycle events dropped because a sink was full."}),
	}
	reg.MustRegister(m.operations, m.attempts, m.denied, m.transitions, m.perOp, m.tokens, m.conflicts, m.Dropped)
	return m
}

// policyMetrics holds one policy's resolved series, so the hot path never
// hashes label values.
type policyMetrics struct {
	m           *Metrics
	name        string
	attempts    map[Class]prometheus.Counter
	transitions map[State]prometheus.Counter
	ops         map[State]prometheus.Counter
	perOp       prometheus.Observer
	budget      prometheus.Gauge
}

func (m *Metrics) forPolicy(name string) *policyMetrics {
	if m == nil {
		return nil
	}
	pm := &policyMetrics{m: m, name: name, attempts: map[Class]prometheus.Counter{},
		transitions: map[State]prometheus.Counter{}, ops: map[State]prometheus.Counter{},
		perOp: m.perOp.WithLabelValues(name)}
	for _, c := range []Class{Success, Transient, Ambiguous, Permanent, Unrecognized} {
		pm.attempts[c] = m.attempts.WithLabelValues(name, string(c))
	}
	for _, s := range []State{Submitted, Attempting, BackoffWait, Dispatched, BudgetExhausted, TerminalExhausted, UnknownOutcome} {
		pm.transitions[s] = m.transitions.WithLabelValues(name, string(s))
		if s.Terminal() {
			pm.ops[s] = m.operations.WithLabelValues(name, string(s))
		}
	}
	return pm
}

func (m *Metrics) forBudget(key string, b *budget.Budget) prometheus.Gauge {
	if m == nil {
		return nil
	}
	g := m.tokens.WithLabelValues(key)
	g.Set(b.Tokens())
	return g
}

func (m *Metrics) conflict(budget string) {
	if m != nil {
		m.conflicts.WithLabelValues(budget).Inc()
	}
}

func (pm *policyMetrics) attempt(c Class) {
	if pm != nil {
		pm.attempts[c].Inc()
	}
}

func (pm *policyMetrics) transition(s State) {
	if pm == nil {
		return
	}
	pm.transitions[s].Inc()
	if c, ok := pm.ops[s]; ok {
		c.Inc()
	}
}

func (pm *policyMetrics) finished(attempts int) {
	if pm != nil {
		pm.perOp.Observe(float64(attempts))
	}
}

func (pm *policyMetrics) tokens(b *budget.Budget) {
	if pm != nil && pm.budget != nil {
		pm.budget.Set(b.Tokens())
	}
}

func (pm *policyMetrics) denied(reason string) {
	if pm != nil {
		pm.m.denied.WithLabelValues(pm.name, reason).Inc()
	}
}
