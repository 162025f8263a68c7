package retry

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/runtime/budget"
)

// Metrics are the runtime's Prometheus metrics. Labels are bounded: policy
// and budget names come from published configuration, never from requests,
// and the other labels are fixed sets. A nil *Metrics records nothing. It is
// safe for concurrent use.
//
// The per-policy operation, attempt and transition series are atomics of the
// policy's own, read when Prometheus collects: an operation whose first
// attempt succeeds (the common case) costs one atomic add, which stands for
// its six series (SUBMITTED, ATTEMPTING and DISPATCHED transitions, the
// DISPATCHED operation, the success attempt and its attempts-per-operation
// observation of 1).
type Metrics struct {
	denied    *prometheus.CounterVec
	tokens    *prometheus.GaugeVec
	conflicts *prometheus.CounterVec
	Dropped   prometheus.Counter

	operations, attempts, transitions, perOp *prometheus.Desc

	mu       sync.Mutex
	policies map[string]*policyMetrics
}

// perOpBuckets are retryguard_attempts_per_operation's buckets: 1 to 5
// attempts (limits.MaxAttemptsCeiling is 3).
const perOpBuckets = 5

// NewMetrics registers the runtime's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		operations: desc(prometheus.Opts{Name: "retryguard_operations_total",
			Help: "Logical operations by final state."}, "policy", "state"),
		attempts: desc(prometheus.Opts{Name: "retryguard_attempts_total",
			Help: "Attempts by classification of their outcome."}, "policy", "class"),
		transitions: desc(prometheus.Opts{Name: "retryguard_state_transitions_total",
			Help: "Lifecycle transitions by the state entered."}, "policy", "to"),
		perOp: desc(prometheus.Opts{Name: "retryguard_attempts_per_operation",
			Help: "Attempts each logical operation made."}, "policy"),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_retries_denied_total",
			Help: "Retries not made, by reason (budget, deadline, deadline_at_start, retry_after, retry_after_unparseable, permanent, " +
				"ambiguous, not_replay_safe, unrepeatable, exhausted, not_enforced, cancelled)."}, []string{"policy", "reason"}),
		tokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "retryguard_budget_tokens",
			Help: "Tokens in each retry budget, sampled when a policy using it is compiled and on every retry decision."}, []string{"budget"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_budget_conflicts_total",
			Help: "Payloads whose budget figures were not applied: an older generation, or other figures under the same one."}, []string{"budget"}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "retryguard_events_dropped_total",
			Help: "Lifecycle events dropped because a sink was full."}),
		policies: map[string]*policyMetrics{},
	}
	reg.MustRegister(m, m.denied, m.tokens, m.conflicts, m.Dropped)
	return m
}

// desc describes a collected series as the vectors' options do.
func desc(o prometheus.Opts, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(o.Name, o.Help, labels, nil)
}

// policyMetrics are one policy's series. One exists per policy name for the
// life of the Metrics, so that a recompiled policy keeps counting.
type policyMetrics struct {
	m    *Metrics
	name string
	// firstTry counts operations whose first attempt succeeded: each is one
	// more in six series, added when they are collected.
	firstTry    atomic.Uint64
	transitions [len(stateNames)]atomic.Uint64
	attempts    [len(classNames)]atomic.Uint64
	// perOp counts operations by the attempts they made: [n-1] for n in
	// 1..perOpBuckets, [perOpBuckets] for more; perOpSum is their total.
	perOp    [perOpBuckets + 1]atomic.Uint64
	perOpSum atomic.Uint64
}

// stateNames and classNames are the fixed label sets of the per-policy
// series; stateIndex and classIndex are switches, cheaper than a map lookup
// on the hot path.
var (
	stateNames = [...]State{Submitted, Attempting, BackoffWait, Dispatched, BudgetExhausted, TerminalExhausted, UnknownOutcome}
	classNames = [...]Class{classSuccess, Transient, Ambiguous, Permanent, Unrecognized}
)

func stateIndex(s State) int {
	switch s {
	case Submitted:
		return 0
	case Attempting:
		return 1
	case BackoffWait:
		return 2
	case Dispatched:
		return 3
	case BudgetExhausted:
		return 4
	case TerminalExhausted:
		return 5
	}
	return 6 // UnknownOutcome
}

func classIndex(c Class) int {
	switch c {
	case classSuccess:
		return 0
	case Transient:
		return 1
	case Ambiguous:
		return 2
	case Permanent:
		return 3
	}
	return 4 // Unrecognized
}

func (m *Metrics) forPolicy(name string) *policyMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pm, ok := m.policies[name]
	if !ok {
		pm = &policyMetrics{m: m, name: name}
		m.policies[name] = pm
	}
	return pm
}

// Describe implements prometheus.Collector for the per-policy series.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.operations
	ch <- m.attempts
	ch <- m.transitions
	ch <- m.perOp
}

// Collect implements prometheus.Collector: it reads every policy's atomics,
// adding its first-try successes to the six series each stands for.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	pms := make([]*policyMetrics, 0, len(m.policies))
	for _, pm := range m.policies {
		pms = append(pms, pm)
	}
	m.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, pm := range pms {
		first := pm.firstTry.Load()
		for i, s := range stateNames {
			v := pm.transitions[i].Load()
			if s == Submitted || s == Attempting || s == Dispatched {
				v += first
			}
			counter(m.transitions, v, pm.name, string(s))
			if s.Terminal() {
				counter(m.operations, v, pm.name, string(s))
			}
		}
		for i, c := range classNames {
			v := pm.attempts[i].Load()
			if c == classSuccess {
				v += first
			}
			counter(m.attempts, v, pm.name, string(c))
		}
		buckets := make(map[float64]uint64, perOpBuckets)
		var count uint64
		for i := range perOpBuckets {
			count += pm.perOp[i].Load()
			if i == 0 {
				count += first
			}
			buckets[float64(i+1)] = count
		}
		count += pm.perOp[perOpBuckets].Load()
		ch <- prometheus.MustNewConstHistogram(m.perOp, count, float64(pm.perOpSum.Load()+first), buckets, pm.name)
	}
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

// succeededFirst records an operation whose first attempt succeeded.
func (pm *policyMetrics) succeededFirst() {
	if pm != nil {
		pm.firstTry.Add(1)
	}
}

// started records SUBMITTED and the first ATTEMPTING of an operation whose
// first attempt failed (succeededFirst covers them otherwise).
func (pm *policyMetrics) started() {
	if pm != nil {
		pm.transitions[stateIndex(Submitted)].Add(1)
		pm.transitions[stateIndex(Attempting)].Add(1)
	}
}

func (pm *policyMetrics) attempt(c Class) {
	if pm != nil {
		pm.attempts[classIndex(c)].Add(1)
	}
}

func (pm *policyMetrics) transition(s State) {
	if pm != nil {
		pm.transitions[stateIndex(s)].Add(1)
	}
}

func (pm *policyMetrics) finished(attempts int) {
	if pm != nil {
		pm.perOp[min(max(attempts, 1), perOpBuckets+1)-1].Add(1)
		pm.perOpSum.Add(uint64(max(attempts, 0)))
	}
}

func (pm *policyMetrics) denied(reason string) {
	if pm != nil {
		pm.m.denied.WithLabelValues(pm.name, reason).Inc()
	}
}
