package retry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/runtime/budget"
)

// Event is one lifecycle transition of one operation, or a hedge: an event
// whose From and To are both ATTEMPTING is no transition (the lifecycle
// stays ATTEMPTING, and RETRY-SMS-001's state machine is unchanged) but
// attempt Attempt sent while an earlier one is pending (docs/runtime.md,
// Hedging).
type Event struct {
	// OperationID numbers operations within this process, to order and group events.
	OperationID uint64     `json:"operation"`
	Policy      string     `json:"policy"`
	Namespace   string     `json:"namespace,omitempty"`
	Topic       string     `json:"-"`
	Key         string     `json:"key,omitempty"`
	From        State      `json:"from,omitempty"`
	To          State      `json:"to"`
	Attempt     int        `json:"attempt"`
	At          time.Time  `json:"at"`
	Code        codes.Code `json:"code,omitempty"`
}

// EventSink receives lifecycle events. Emit must never block the operation:
// a sink that cannot keep up drops and counts.
type EventSink interface {
	Emit(Event)
}

// ChannelSink is a bounded, non-blocking EventSink: Emit drops (and counts)
// when the buffer is full, so telemetry never slows a call. Read Events from
// C. It is safe for concurrent use.
type ChannelSink struct {
	C       chan Event
	dropped atomic.Uint64
	onDrop  func()
}

// NewChannelSink returns a sink buffering up to size events.
func NewChannelSink(size int) *ChannelSink { return &ChannelSink{C: make(chan Event, size)} }

// Emit enqueues ev, or drops it when the buffer is full.
func (s *ChannelSink) Emit(ev Event) {
	select {
	case s.C <- ev:
	default:
		s.dropped.Add(1)
		if s.onDrop != nil {
			s.onDrop()
		}
	}
}

// OnDrop calls f for every dropped event, for example a metric's Inc.
// Call it before the sink is in use.
func (s *ChannelSink) OnDrop(f func()) { s.onDrop = f }

// Dropped counts the events dropped so far.
func (s *ChannelSink) Dropped() uint64 { return s.dropped.Load() }

// AttemptRecord is the evidence of one attempt and what was done with it:
// the (classification, status, retry-eligible, budget consumed) tuple, and
// the budget's refusal when it refused the retry.
type AttemptRecord struct {
	Attempt        int           `json:"attempt"`
	Evidence       Evidence      `json:"evidence"`
	RetryEligible  bool          `json:"retryEligible"`
	BudgetConsumed bool          `json:"budgetConsumed"`
	BudgetDenied   budget.Denial `json:"budgetDenied,omitempty"`
	Error          string        `json:"error,omitempty"`
}

// DeadLetter is an operation that ended BUDGET_EXHAUSTED,
// TERMINAL_EXHAUSTED or UNKNOWN_OUTCOME, with what reconciliation needs.
type DeadLetter struct {
	OperationID uint64          `json:"operation"`
	Namespace   string          `json:"namespace,omitempty"`
	Policy      string          `json:"policy"`
	Key         string          `json:"key,omitempty"`
	State       State           `json:"state"`
	Code        codes.Code      `json:"code"`
	Attempts    []AttemptRecord `json:"attempts"`
	At          time.Time       `json:"at"`
}

// DeadLetterSink stores dead letters durably. Write returns only once the
// letter is safe (or with the error that says it is not). Do passes a ctx
// that ends with the operation's deadline (not when the caller cancels, so
// that a cancelled operation is still recorded); a sink that cannot store
// the letter by then returns an error, which Do reports, rather than hold
// the caller past its deadline.
type DeadLetterSink interface {
	Write(ctx context.Context, l DeadLetter) error
}
