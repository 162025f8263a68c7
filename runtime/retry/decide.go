package retry

import (
	"fmt"
	"github.com/retryguard/retryguard/runtime/backoff"
	"time"

	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/codes"
)

// DecisionInput is everything one retry decision rests on. Do fills it
// after each failed attempt; Decide reads nothing else (no clock, no
// randomness), so the same input always gives the same decision.
type DecisionInput struct {
	// Evidence is what the failed attempt showed: its class, HTTP status,
	// transport failure, whether it may have been dispatched, Retry-After.
	Evidence Evidence
	// NotEnforced says why the policy is not in force (unknown to the
	// watcher, published NoRetry, an unusable key template); "" when it is.
	NotEnforced string
	// ReplaySafe: repeating the operation is safe, because its method is
	// idempotent or every attempt carries the same idempotency key.
	ReplaySafe bool
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// MaxAttempts counts every attempt, the first included.
	MaxAttempts int
	// Remaining is the deadline left when the failure was seen: the sooner
	// of the policy's deadline and the caller's, on the executor's clock.
	Remaining time.Duration
	// Wait is the backoff draw for the next attempt. The retry waits
	// max(Wait, Evidence.RetryAfter).
	Wait time.Duration
	// AttemptCost is what the next attempt is expected to take
	// (perAttemptTimeout; 0 when the policy sets none).
	AttemptCost time.Duration
	// MinRemaining is the reserve: no retry starts with this much or less
	// of the deadline left.
	MinRemaining time.Duration
	// RetryAfterMax is the longest server delay honoured.
	RetryAfterMax time.Duration
	// BudgetAsked says that Budget holds the retry budget's verdict. Do asks
	// the budget only once Decide answers AskBudget, so that no token is
	// spent on a retry another rule forbids. A policy without a budget
	// never retries: Do passes budget.NoTokens for it.
	BudgetAsked bool
	Budget      budget.Denial
}

// Decision is what to do after a failed attempt.
type Decision struct {
	// Next is BackoffWait to retry after Sleep, or the state the operation
	// ends in.
	Next State
	// Code says why the operation ends ("" when it retries).
	Code codes.Code
	// Detail explains the decision to a human.
	Detail string
	// Reason is a bounded label for metrics: budget, deadline, retry_after,
	// retry_after_unparseable, permanent, ambiguous, not_replay_safe,
	// exhausted or not_enforced ("" when it retries).
	Reason string
	// Sleep is the wait before the next attempt.
	Sleep time.Duration
	// Eligible is the failure record's RETRY_ELIGIBLE: the failure was one
	// a retry may fix, whether or not a retry was then made.
	Eligible bool
	// AskBudget: every rule but the budget allows a retry; ask the budget
	// and decide again with its verdict.
	AskBudget bool
}

// Retry reports whether another attempt follows.
func (d Decision) Retry() bool { return d.Next == BackoffWait }

// Reasons a retry was denied, bounded for metric labels.
const (
	deniedBudget          = "budget"
	deniedDeadline        = "deadline"
	deniedRetryAfter      = "retry_after"
	deniedUnparseable     = "retry_after_unparseable"
	deniedPermanent       = "permanent"
	deniedAmbiguous       = "ambiguous"
	deniedNotReplaySafe   = "not_replay_safe"
	deniedExhausted       = "exhausted"
	deniedNotEnforced     = "not_enforced"
	deniedCancelled       = "cancelled"
	deniedDeadlineAtStart = "deadline_at_start"
)

// Decide applies a policy to one failed attempt, in this order:
//
//  1. a permanent failure ends TERMINAL_EXHAUSTED;
//  2. a policy not in force makes no retry;
//  3. an unparseable Retry-After ends TERMINAL_EXHAUSTED (MC-FM-01);
//  4. unrecognized evidence ends: UNKNOWN_OUTCOME after a dispatched
//     transport failure, TERMINAL_EXHAUSTED otherwise;
//  5. a retry of any kind needs replay safety (seed 003:
//     retry_allowed(429, safe=False) is false), even after proof that the
//     request never left: without it an ambiguous failure ends
//     UNKNOWN_OUTCOME, any other TERMINAL_EXHAUSTED;
//  6. the failure is now eligible, and a retry also needs attempts left, a
//     Retry-After within RetryAfterMax, a deadline that can hold the wait
//     and the next attempt (backoff.CanStart), and last, the budget.
//
// A stop at step 6 after an ambiguous failure ends UNKNOWN_OUTCOME whatever
// the reason, since the outcome of the attempt is unknown; otherwise a
// budget refusal ends BUDGET_EXHAUSTED and any other TERMINAL_EXHAUSTED.
func Decide(in DecisionInput) Decision {
	ev := in.Evidence
	switch {
	case ev.Class == Permanent:
		return stop(TerminalExhausted, codes.PermanentFailure, fmt.Sprintf("HTTP %d is permanent", ev.Status), deniedPermanent)
	case in.NotEnforced != "":
		end := TerminalExhausted
		if ev.Dispatched && ev.Transport != "" {
			end = UnknownOutcome
		}
		return stop(end, codes.PolicyNotEnforced, in.NotEnforced+": one attempt, failed"+describe(ev), deniedNotEnforced)
	case ev.RetryAfterUnparseable:
		return stop(TerminalExhausted, codes.PermanentFailure, "an unparseable Retry-After"+describe(ev)+" is a terminal failure", deniedUnparseable)
	case ev.Class == Unrecognized && ev.Transport != "" && ev.Dispatched:
		return stop(UnknownOutcome, codes.UnknownOutcome, ev.Transport+" (not listed for retry) after the request may have been applied", deniedAmbiguous)
	case ev.Class == Unrecognized:
		return stop(TerminalExhausted, codes.PermanentFailure, "evidence the policy does not list for retry"+describe(ev), deniedPermanent)
	case !in.ReplaySafe && ev.Class == Ambiguous:
		return stop(UnknownOutcome, codes.UnknownOutcome,
			ev.Transport+" after the request may have been applied, with no idempotency key and no idempotent method", deniedAmbiguous)
	case !in.ReplaySafe:
		return stop(TerminalExhausted, codes.AmbiguousWithoutIdempotency,
			"a retry needs an idempotency key or an idempotent method, and the operation has neither"+describe(ev), deniedNotReplaySafe)
	}
	end := TerminalExhausted
	if ev.Class == Ambiguous {
		end = UnknownOutcome
	}
	sleep := max(in.Wait, ev.RetryAfter)
	var d Decision
	switch {
	case in.Attempt >= in.MaxAttempts:
		d = stop(end, codes.RetryLimitExceeded, fmt.Sprintf("all %d attempts failed", in.MaxAttempts), deniedExhausted)
	case ev.RetryAfter > in.RetryAfterMax:
		d = stop(end, codes.RetryAfterTooLong, fmt.Sprintf("Retry-After %s is beyond retryAfter.maxDelay %s", ev.RetryAfter, in.RetryAfterMax), deniedRetryAfter)
	case !backoff.CanStart(in.Remaining-sleep, in.AttemptCost, in.MinRemaining):
		d = stop(end, codes.DeadlineExceeded, fmt.Sprintf("%s left cannot hold a %s wait and a %s attempt and keep the %s reserve",
			in.Remaining.Round(time.Millisecond), sleep, in.AttemptCost, in.MinRemaining), deniedDeadline)
	case !in.BudgetAsked:
		d = Decision{AskBudget: true}
	case in.Budget != budget.Allowed:
		if end == TerminalExhausted {
			end = BudgetExhausted
		}
		d = stop(end, codes.RetryBudgetExhausted, fmt.Sprintf("retry budget denied a retry (%s)", in.Budget), deniedBudget)
	default:
		d = Decision{Next: BackoffWait, Sleep: sleep}
	}
	d.Eligible = true
	return d
}

func stop(s State, c codes.Code, detail, reason string) Decision {
	return Decision{Next: s, Code: c, Detail: detail, Reason: reason}
}

func describe(ev Evidence) string {
	switch {
	case ev.Status != 0:
		return fmt.Sprintf(" (HTTP %d)", ev.Status)
	case ev.Transport != "":
		return " (" + ev.Transport + ")"
	}
	return ""
}
