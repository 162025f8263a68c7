package retry

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
)

// Metrics are the runtime's Prometheus metrics. Labels are bounded: policy
// and budget names come from published configuration, never from requests,
// and the other labels are fixed sets. A nil *Metrics records nothing. It is
// safe for concurrent use.
//
// The per-policy operation, attempt and transition series are atomics of the
// policy's own, read when Prometheus collects: an operation whose first
// attempt succeeds (the common case) costs a clock read and one atomic add,
// its duration's count and sum in one word, which stand for its seven series (SUBMITTED,
// ATTEMPTING and DISPATCHED transitions, the DISPATCHED operation, the success
// attempt, its attempts-per-operation observation of 1 and its duration).
type Metrics struct {
	denied    *prometheus.CounterVec
	tokens    *prometheus.GaugeVec
	conflicts *prometheus.CounterVec
	Dropped   prometheus.Counter

	operations, attempts, transitions, perOp, duration, backoff, recovery, lag *prometheus.Desc

	mu       sync.Mutex
	policies map[string]*policyMetrics
}

// perOpBuckets are retryguard_attempts_per_operation's buckets: 1 to 5
// attempts (limits.MaxAttemptsCeiling is 3).
const perOpBuckets = 5

// durationBounds are retryguard_operation_duration_seconds' upper bounds. They
// hold 1.2 s, the latency SLA's p95 bound (docs/metrics.md), so that the share of
// operations over it is a bucket's count, not an interpolation, and 4 s, the
// seed's operation deadline.
var durationBounds = [...]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 1200 * time.Millisecond,
	2500 * time.Millisecond, 4 * time.Second, 10 * time.Second}

// backoffBounds are retryguard_backoff_seconds' upper bounds: the full-jitter
// ceilings of the spec's schedule (100 ms x 2^attempt) up to its 3 s cap.
var backoffBounds = [...]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3 * time.Second}

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
		duration: desc(prometheus.Opts{Name: "retryguard_operation_duration_seconds",
			Help: "Time from a logical operation's start to its final state, backoff included, by that state."}, "policy", "state"),
		backoff: desc(prometheus.Opts{Name: "retryguard_backoff_seconds",
			Help: "Backoff waits chosen before a retry."}, "policy"),
		recovery: desc(prometheus.Opts{Name: "retryguard_recovery_seconds",
			Help: "Time from a fault's end (under 1% of a second's primaries failing) until retries fell under 2 a second."}, "policy"),
		lag: desc(prometheus.Opts{Name: "retryguard_recovery_lag_seconds",
			Help: "Time since the fault's end while retries stay at 2 a second or more; 0 otherwise."}, "policy"),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retryguard_retries_denied_total",
			Help: "Retries not made, by reason (budget, deadline, deadline_at_start, retry_after, retry_after_unparseable, permanent, tls, " +
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
	// firstTry holds the operations whose first attempt succeeded, by their
	// duration: each is one more in six series and in the DISPATCHED
	// duration's, added when they are collected, so that such an operation
	// costs one clock read and the one atomic add of its duration (see
	// durations.observeFast).
	firstTry    durations
	transitions [len(stateNames)]atomic.Uint64
	attempts    [len(classNames)]atomic.Uint64
	// perOp counts operations by the attempts they made: [n-1] for n in
	// 1..perOpBuckets, [perOpBuckets] for more; perOpSum is their total.
	perOp    [perOpBuckets + 1]atomic.Uint64
	perOpSum atomic.Uint64
	// duration[i] holds the operations that ended in terminalNames[i].
	duration [len(terminalNames)]durations
	backoff  durations
	recovery recovery
}

// durations is a histogram of durations as atomics: counts[i] for the
// durations within bounds[i] (and above bounds[i-1]), counts[len(bounds)] for
// longer ones, and sum their nanoseconds. Sized for the longer bound set.
type durations struct {
	counts [len(durationBounds) + 1]atomic.Uint64
	sum    atomic.Uint64
	fast   packed
}

// packed holds durations within the first bound in one word, so that each
// costs one atomic add: their count above packedShift, their nanoseconds
// below. An add that brings the count to packedFlush or more moves the word
// into counts[0] and sum. packedFlush durations of at most 5 ms each use
// 2^34 ns of the 2^42 the word's sum holds (2^12 of the count's 2^22), so
// the adders that come while the word is moved cannot overflow it.
type packed struct {
	word atomic.Uint64
	// moving counts the moves between taking the word and adding it to the
	// histogram, moved the moves done: a reader retries while one is under
	// way, or when one ended meanwhile (see snapshot).
	moving atomic.Int64
	moved  atomic.Uint64
}

const (
	packedShift = 42
	packedMask  = 1<<packedShift - 1
	packedFlush = 1 << 12
)

// observeFast is observe on durationBounds, in one atomic add when d is
// within the first bound.
func (h *durations) observeFast(d time.Duration) {
	if d < 0 || d > durationBounds[0] {
		h.observe(durationBounds[:], d)
		return
	}
	if w := h.fast.word.Add(1<<packedShift | uint64(d)); w>>packedShift >= packedFlush {
		h.move()
	}
}

// move adds the packed word to counts[0] and sum and empties it.
func (h *durations) move() {
	h.fast.moving.Add(1)
	for {
		w := h.fast.word.Load()
		if w>>packedShift < packedFlush {
			break // another adder moved it
		}
		if h.fast.word.CompareAndSwap(w, 0) {
			h.counts[0].Add(w >> packedShift)
			h.sum.Add(w & packedMask)
			break
		}
	}
	h.fast.moved.Add(1)
	h.fast.moving.Add(-1)
}

// snapshot returns h's counts and sum with the packed word added, read
// while no move is under way, so that successive snapshots never go down.
func (h *durations) snapshot() (counts [len(durationBounds) + 1]uint64, sum uint64) {
	for {
		moved := h.fast.moved.Load()
		if h.fast.moving.Load() == 0 {
			w := h.fast.word.Load()
			for i := range h.counts {
				counts[i] = h.counts[i].Load()
			}
			sum = h.sum.Load()
			if h.fast.moving.Load() == 0 && h.fast.moved.Load() == moved {
				counts[0] += w >> packedShift
				return counts, sum + w&packedMask
			}
		}
		runtime.Gosched()
	}
}

// observe counts d. A linear scan: the first bound holds a fast operation.
func (h *durations) observe(bounds []time.Duration, d time.Duration) {
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(uint64(max(d, 0)))
}

// count is how many durations h holds.
func (h *durations) count() uint64 {
	counts, _ := h.snapshot()
	var n uint64
	for _, c := range counts {
		n += c
	}
	return n
}

// plus returns a copy of h with o's first n+1 counts and sum added.
func (h *durations) plus(o *durations, n int) *durations {
	hc, hs := h.snapshot()
	oc, osum := o.snapshot()
	sum := new(durations)
	for i := range n + 1 {
		sum.counts[i].Store(hc[i] + oc[i])
	}
	sum.sum.Store(hs + osum)
	return sum
}

// metric reads h as a cumulative Prometheus histogram in seconds.
func (h *durations) metric(desc *prometheus.Desc, bounds []time.Duration, labels ...string) prometheus.Metric {
	counts, sum := h.snapshot()
	buckets := make(map[float64]uint64, len(bounds))
	var count uint64
	for i, b := range bounds {
		count += counts[i]
		buckets[b.Seconds()] = count
	}
	count += counts[len(bounds)]
	return prometheus.MustNewConstHistogram(desc, count, time.Duration(sum).Seconds(), buckets, labels...)
}

// stateNames and classNames are the fixed label sets of the per-policy
// series; stateIndex and classIndex are switches, cheaper than a map lookup
// on the hot path.
var (
	stateNames = [...]State{Submitted, Attempting, BackoffWait, Dispatched, BudgetExhausted, TerminalExhausted, UnknownOutcome}
	classNames = [...]Class{classSuccess, Transient, Ambiguous, Permanent, Unrecognized}
	// terminalNames are the final states, retryguard_operation_duration_seconds' state label.
	terminalNames = [...]State{Dispatched, BudgetExhausted, TerminalExhausted, UnknownOutcome}
)

func terminalIndex(s State) int {
	switch s {
	case Dispatched:
		return 0
	case BudgetExhausted:
		return 1
	case TerminalExhausted:
		return 2
	}
	return 3 // UnknownOutcome
}

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

// forPolicy returns name's series; clk (the first executor's clock) closes
// its recovery windows when they are collected.
func (m *Metrics) forPolicy(name string, clk clock.Clock) *policyMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pm, ok := m.policies[name]
	if !ok {
		pm = &policyMetrics{m: m, name: name}
		pm.recovery.clock = clk
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
	ch <- m.duration
	ch <- m.backoff
	ch <- m.recovery
	ch <- m.lag
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
		first := pm.firstTry.count()
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
		for i, s := range terminalNames {
			h := &pm.duration[i]
			if s == Dispatched {
				h = h.plus(&pm.firstTry, len(durationBounds))
			}
			ch <- h.metric(m.duration, durationBounds[:], pm.name, string(s))
		}
		ch <- pm.backoff.metric(m.backoff, backoffBounds[:], pm.name)
		lag, done := pm.recoveryNow()
		ch <- done.metric(m.recovery, recoveryBounds[:], pm.name)
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, lag.Seconds(), pm.name)
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

// succeededFirst records an operation whose first attempt succeeded in d.
func (pm *policyMetrics) succeededFirst(d time.Duration) { pm.firstTry.observeFast(d) }

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

// took records how long an operation took to reach its final state s.
func (pm *policyMetrics) took(s State, d time.Duration) {
	if pm != nil {
		pm.duration[terminalIndex(s)].observe(durationBounds[:], d)
	}
}

// waits records the backoff chosen before a retry.
func (pm *policyMetrics) waits(d time.Duration) {
	if pm != nil {
		pm.backoff.observe(backoffBounds[:], d)
	}
}

func (pm *policyMetrics) denied(reason string) {
	if pm != nil {
		pm.m.denied.WithLabelValues(pm.name, reason).Inc()
	}
}
