package retry

import (
	"errors"
	"testing"
)

func TestLifecycle(t *testing.T) {
	all := []State{Submitted, Attempting, BackoffWait, Dispatched, BudgetExhausted, TerminalExhausted, UnknownOutcome}
	legal := map[[2]State]bool{
		{Submitted, Attempting}: true, {BackoffWait, Attempting}: true,
		{BackoffWait, TerminalExhausted}: true, {BackoffWait, UnknownOutcome}: true,
		{Attempting, Dispatched}: true, {Attempting, BackoffWait}: true, {Attempting, BudgetExhausted}: true,
		{Attempting, TerminalExhausted}: true, {Attempting, UnknownOutcome}: true,
	}
	for _, from := range all {
		for _, to := range all {
			m := &machine{state: from}
			err := m.to(to)
			if legal[[2]State{from, to}] != (err == nil) {
				t.Errorf("%s → %s: %v", from, to, err)
			}
			var ite *illegalTransitionError
			if err != nil && (!errors.As(err, &ite) || m.state != from) {
				t.Errorf("%s → %s: an illegal transition must be an error and change nothing", from, to)
			}
		}
	}
	for _, s := range []State{Dispatched, BudgetExhausted, TerminalExhausted, UnknownOutcome} {
		if !s.Terminal() {
			t.Errorf("%s is terminal", s)
		}
	}
	if Dispatched.DeadLettered() || !UnknownOutcome.DeadLettered() {
		t.Error("dead-letter states")
	}
}
