package retry

import "fmt"

// State is a step of an operation's lifecycle.
type State string

// The lifecycle, as RETRY-SMS-001 defines it:
//
//	SUBMITTED → ATTEMPTING → DISPATCHED | BACKOFF_WAIT | BUDGET_EXHAUSTED |
//	                         TERMINAL_EXHAUSTED | UNKNOWN_OUTCOME
//	BACKOFF_WAIT → ATTEMPTING | TERMINAL_EXHAUSTED | UNKNOWN_OUTCOME
//
// BACKOFF_WAIT → ATTEMPTING needs the sleep over and more than minRemaining
// of the deadline left. A wait that starts no attempt (the caller's context
// ended, or the deadline no longer allows one) ends from BACKOFF_WAIT, in
// UNKNOWN_OUTCOME after an ambiguous failure and TERMINAL_EXHAUSTED
// otherwise: never an ATTEMPTING step with no attempt in it.
const (
	Submitted         State = "SUBMITTED"
	Attempting        State = "ATTEMPTING"
	BackoffWait       State = "BACKOFF_WAIT"
	Dispatched        State = "DISPATCHED"
	BudgetExhausted   State = "BUDGET_EXHAUSTED"
	TerminalExhausted State = "TERMINAL_EXHAUSTED"
	UnknownOutcome    State = "UNKNOWN_OUTCOME"
)

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	switch s {
	case Submitted, Attempting, BackoffWait:
		return false
	}
	return true
}

// DeadLettered reports whether an operation ending in s goes to the dead letter.
func (s State) DeadLettered() bool {
	return s == BudgetExhausted || s == TerminalExhausted || s == UnknownOutcome
}

// canTransition reports whether from → to is legal.
func canTransition(from, to State) bool {
	switch from {
	case Submitted:
		return to == Attempting
	case BackoffWait:
		return to == Attempting || to == TerminalExhausted || to == UnknownOutcome
	case Attempting:
		switch to {
		case Dispatched, BackoffWait, BudgetExhausted, TerminalExhausted, UnknownOutcome:
			return true
		}
	}
	return false
}

// illegalTransitionError is returned, never panicked, for a transition the
// lifecycle forbids.
type illegalTransitionError struct{ From, To State }

func (e *illegalTransitionError) Error() string {
	return fmt.Sprintf("retryguard: illegal lifecycle transition %s → %s", e.From, e.To)
}

// machine is one operation's lifecycle. Not safe for concurrent use: an
// operation runs on one goroutine.
type machine struct {
	state State
}

func (m *machine) to(next State) error {
	if !canTransition(m.state, next) {
		return &illegalTransitionError{From: m.state, To: next}
	}
	m.state = next
	return nil
}
