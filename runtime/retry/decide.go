package retry

import (
	"fmt"
	"github.com/retryguard/retryguard/contract/backoff"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/runtime/budget"
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
	// idempotent or every attempt carries the same idempotency key. For the
	// RoundTripper it is a fact of the request sent, not of the policy.
	ReplaySafe bool
	// MayHaveApplied: an earlier attempt of the operation may have been
	// applied (its failure was ambiguous). The operation's outcome is then
	// unknown until an attempt succeeds, whatever stops it.
	MayHaveApplied bool
	// Unrepeatable says why the request cannot be sent again whatever the
	// policy allows (a body beyond the RoundTripper's buffering bound, or
	// one it cannot re-read); "" when it can.
	Unrepeatable string
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
	// PerAttemptTimeout is what the next attempt is expected to take
	// (perAttemptTimeout; 0 when the policy sets none).
	PerAttemptTimeout time.Duration
	// MinRemaining is the reserve: no retry starts with this much or less
	// of the deadline left.
	MinRemaining time.Duration
	// RetryAfterMaxDelay is the longest server delay honoured.
	RetryAfterMaxDelay time.Duration
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
	// retry_after_unparseable, permanent, tls, ambiguous, not_replay_safe,
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
	deniedTLS             = "tls"
	deniedAmbiguous       = "ambiguous"
	deniedNotReplaySafe   = "not_replay_safe"
	deniedExhausted       = "exhausted"
	deniedNotEnforced     = "not_enforced"
	deniedCancelled       = "cancelled"
	deniedDeadlineAtStart = "deadline_at_start"
	deniedUnrepeatable    = "unrepeatable"
)

// Decide applies a policy to one failed attempt, in this order:
//
//  1. a permanent failure ends (a 4xx other than 429, or a TLS handshake
//     that failed before the request was sent);
//  2. a policy not in force makes no retry;
//  3. an unparseable Retry-After ends (MC-FM-01);
//  4. unrecognized evidence ends: UNKNOWN_OUTCOME when it came after the
//     request may have been dispatched (any failure without a status, and
//     a 502 or 504), since it may have been applied;
//  5. a retry re-sends a request that may have reached the dependency when
//     this attempt was dispatched or an earlier one may have been applied:
//     it then needs replay safety (RG-LOAD: retry_allowed(429,
//     safe=False) is false). Proof that this request never left, with no
//     earlier attempt that may have been applied, needs none (RG-RETRY:
//     "proven non-dispatch ... can permit another attempt even without a
//     server retryability flag"; RG-LAYERS: the connector handles "a
//     connection refused before any request left the process");
//  6. the failure is now eligible, and a retry also needs a request that
//     can be sent again, attempts left, a Retry-After within
//     RetryAfterMaxDelay, a deadline that can hold the wait and the next attempt
//     (backoff.CanStart), and last, the budget.
//
// Every stop ends UNKNOWN_OUTCOME once this attempt or an earlier one may
// have been applied (MayHaveApplied), whatever the rule that stops it: the
// outcome is unknown and goes to reconciliation, never to the fallback as a
// failure (RG-LOAD). Otherwise a budget refusal ends BUDGET_EXHAUSTED and
// any other stop TERMINAL_EXHAUSTED. The code says which rule stopped it.
func Decide(in DecisionInput) Decision {
	ev := in.Evidence
	end := TerminalExhausted
	if in.MayHaveApplied || mayHaveApplied(ev) {
		end = UnknownOutcome
	}
	switch {
	case ev.Class == Permanent && tlsName(ev.Transport):
		return stop(end, codes.PermanentFailure, "the TLS handshake failed"+describe(ev)+
			" before the request was sent: a retry cannot fix it"+earlier(in), deniedTLS)
	case ev.Class == Permanent:
		return stop(end, codes.PermanentFailure, fmt.Sprintf("HTTP %d is permanent", ev.Status)+earlier(in), deniedPermanent)
	case in.NotEnforced != "":
		return stop(end, codes.PolicyNotEnforced, in.NotEnforced+": one attempt, failed"+describe(ev), deniedNotEnforced)
	case ev.RetryAfterUnparseable:
		return stop(end, codes.PermanentFailure, "an unparseable Retry-After"+describe(ev)+" is a terminal failure"+earlier(in), deniedUnparseable)
	case ev.Class == Unrecognized && end == UnknownOutcome && !in.MayHaveApplied:
		return stop(end, codes.UnknownOutcome, "evidence the policy does not list"+describe(ev)+", after the request may have been applied", deniedAmbiguous)
	case ev.Class == Unrecognized:
		return stop(end, codes.PermanentFailure, "evidence the policy does not list"+describe(ev)+earlier(in), deniedPermanent)
	case !in.ReplaySafe && (ev.Dispatched || in.MayHaveApplied) && end == UnknownOutcome:
		return stop(end, codes.UnknownOutcome, "the request may have been applied"+describe(ev)+
			", and it has no idempotency key and no idempotent method", deniedAmbiguous)
	case !in.ReplaySafe && ev.Dispatched:
		return stop(end, codes.AmbiguousWithoutIdempotency,
			"a retry of a request that reached the dependency needs an idempotency key or an idempotent method, and it has neither"+describe(ev), deniedNotReplaySafe)
	}
	sleep := max(in.Wait, ev.RetryAfter)
	var d Decision
	switch {
	case in.Unrepeatable != "":
		d = stop(end, codes.RetryLimitExceeded, fmt.Sprintf("%s: attempt %d failed", in.Unrepeatable, in.Attempt)+describe(ev)+earlier(in), deniedUnrepeatable)
	case in.Attempt >= in.MaxAttempts:
		d = stop(end, codes.RetryLimitExceeded, fmt.Sprintf("all %d attempts failed", in.MaxAttempts)+earlier(in), deniedExhausted)
	case ev.RetryAfter > in.RetryAfterMaxDelay:
		d = stop(
			end,
			codes.RetryAfterTooLong,
			fmt.Sprintf("Retry-After %s is beyond retryAfter.maxDelay %s", ev.RetryAfter, in.RetryAfterMaxDelay)+earlier(in),
			deniedRetryAfter,
		)
	case !backoff.CanStart(in.Remaining-sleep, in.PerAttemptTimeout, in.MinRemaining):
		d = stop(end, codes.DeadlineExceeded, fmt.Sprintf("%s left cannot hold a %s wait and a %s attempt and keep the %s reserve",
			in.Remaining.Round(time.Millisecond), sleep, in.PerAttemptTimeout, in.MinRemaining)+earlier(in), deniedDeadline)
	case !in.BudgetAsked:
		d = Decision{AskBudget: true}
	case in.Budget != budget.Allowed:
		if end == TerminalExhausted {
			end = BudgetExhausted
		}
		d = stop(end, codes.RetryBudgetExhausted, fmt.Sprintf("retry budget denied a retry (%s)", in.Budget)+earlier(in), deniedBudget)
	default:
		d = Decision{Next: BackoffWait, Sleep: sleep}
	}
	d.Eligible = true
	return d
}

// earlier notes, in a stop's detail, that an earlier attempt may have been
// applied: the reason the operation ends UNKNOWN_OUTCOME.
func earlier(in DecisionInput) string {
	if in.MayHaveApplied {
		return "; an earlier attempt may have been applied, so the outcome is unknown"
	}
	return ""
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
