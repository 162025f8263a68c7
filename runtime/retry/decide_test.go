package retry_test

import (
	"github.com/retryguard/retryguard/contract/backoff"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/retry"
)

const ms = time.Millisecond

// smsInput is RETRY-SMS-001's policy after a first attempt failed with the
// given evidence, with 3,000 ms of its 4,000 ms deadline left, a 150 ms
// backoff draw and the budget's grant.
func smsInput(ev retry.Evidence) retry.DecisionInput {
	return retry.DecisionInput{Evidence: ev, ReplaySafe: true, Attempt: 1, MaxAttempts: 3,
		Remaining: 3000 * ms, Wait: 150 * ms, MinRemaining: 500 * ms, RetryAfterMaxDelay: 3 * time.Second,
		BudgetAsked: true, Budget: budget.Allowed}
}

func status(code int) retry.Evidence {
	return retry.Evidence{Class: retry.Transient, Status: code, Dispatched: true}
}

type want struct {
	next     retry.State
	code     codes.Code
	eligible bool
}

var retrying = want{next: retry.BackoffWait, eligible: true}

func check(t *testing.T, name string, in retry.DecisionInput, w want) {
	t.Helper()
	d := retry.Decide(in)
	if d.Next != w.next || d.Code != w.code || d.Eligible != w.eligible {
		t.Errorf("%s: Decide = %s/%s eligible %v (%s), want %s/%s eligible %v", name, d.Next, d.Code, d.Eligible, d.Detail, w.next, w.code, w.eligible)
	}
	if d.Retry() != (w.next == retry.BackoffWait) || d.Retry() && d.Sleep < max(in.Wait, in.Evidence.RetryAfter) {
		t.Errorf("%s: retry %v after %v", name, d.Retry(), d.Sleep)
	}
	if again := retry.Decide(in); again != d {
		t.Errorf("%s: the same input decided twice differently: %+v, %+v", name, d, again)
	}
}

// RETRY-SMS-001, MC-FM-01 and MC-ST-01: every failure mode of the matrix, and
// every transition out of ATTEMPTING, routed exactly.
func TestDecideFailureModeMatrix(t *testing.T) {
	reset := retry.Evidence{Class: retry.Ambiguous, Transport: limits.ConnectionReset, Dispatched: true}
	timeout := retry.Evidence{Class: retry.Ambiguous, Transport: limits.Timeout, Dispatched: true}
	refused := retry.Evidence{Class: retry.Transient, Transport: limits.ConnectionRefused}
	notSent := retry.Evidence{Class: retry.Transient, Transport: limits.ConnectionReset}
	gateway := retry.Evidence{Class: retry.Ambiguous, Status: 504, Dispatched: true}
	for name, tc := range map[string]struct {
		in   func(retry.DecisionInput) retry.DecisionInput
		ev   retry.Evidence
		want want
	}{
		"429 is transient":          {ev: status(429), want: retrying},
		"503 is transient":          {ev: status(503), want: retrying},
		"504 is ambiguous, keyed":   {ev: gateway, want: retrying},
		"504 without replay safety": {ev: gateway, in: unsafe, want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		"an unlisted 504 is unknown": {ev: retry.Evidence{Class: retry.Unrecognized, Status: 504, Dispatched: true},
			want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		"ECONNRESET after send, keyed": {ev: reset, want: retrying},
		"read timeout, keyed":          {ev: timeout, want: retrying},
		"connection refused":           {ev: refused, want: retrying},
		"400 is permanent": {ev: retry.Evidence{Class: retry.Permanent, Status: 400, Dispatched: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"401 is permanent": {ev: retry.Evidence{Class: retry.Permanent, Status: 401, Dispatched: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"403 is permanent": {ev: retry.Evidence{Class: retry.Permanent, Status: 403, Dispatched: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"404 is permanent": {ev: retry.Evidence{Class: retry.Permanent, Status: 404, Dispatched: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"422 is permanent": {ev: retry.Evidence{Class: retry.Permanent, Status: 422, Dispatched: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"an unrecognized status is terminal": {ev: retry.Evidence{Class: retry.Unrecognized, Status: 500, Dispatched: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"an unparseable header is terminal": {ev: retry.Evidence{Class: retry.Transient, Status: 503, Dispatched: true, RetryAfterUnparseable: true},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
		"an unlisted drop after send is unknown": {ev: retry.Evidence{Class: retry.Unrecognized, Transport: limits.ConnectionReset, Dispatched: true},
			want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		"a drop after send without replay safety":  {ev: reset, in: unsafe, want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		"a 503 without replay safety":              {ev: status(503), in: unsafe, want: want{retry.TerminalExhausted, codes.AmbiguousWithoutIdempotency, false}},
		"a refused connect needs no replay safety": {ev: refused, in: unsafe, want: retrying},
		"a proven non-dispatch needs none":         {ev: notSent, in: unsafe, want: retrying},
		"a 429 without replay safety":              {ev: status(429), in: unsafe, want: want{retry.TerminalExhausted, codes.AmbiguousWithoutIdempotency, false}},
		"a body sent once is not sent again": {ev: status(503), in: func(in retry.DecisionInput) retry.DecisionInput {
			in.Unrepeatable = "the request body is larger than the buffering bound"
			return in
		}, want: want{retry.TerminalExhausted, codes.RetryLimitExceeded, true}},
		"Retry-After 3 s is honoured": {ev: retry.Evidence{Class: retry.Transient, Status: 429, Dispatched: true, RetryAfter: 3 * time.Second},
			in: func(in retry.DecisionInput) retry.DecisionInput { in.Remaining = 4000 * ms; return in }, want: retrying},
		"Retry-After above 3 s fails fast": {ev: retry.Evidence{Class: retry.Transient, Status: 429, Dispatched: true, RetryAfter: 3001 * ms},
			in:   func(in retry.DecisionInput) retry.DecisionInput { in.Remaining = time.Hour; return in },
			want: want{retry.TerminalExhausted, codes.RetryAfterTooLong, true}},
		"ATTEMPTING → BUDGET_EXHAUSTED: balance <= 0": {ev: status(503), in: denied(budget.NoTokens),
			want: want{retry.BudgetExhausted, codes.RetryBudgetExhausted, true}},
		"the ratio cap refuses too": {ev: status(503), in: denied(budget.RatioExceeded),
			want: want{retry.BudgetExhausted, codes.RetryBudgetExhausted, true}},
		"an ambiguous failure the budget refuses":    {ev: reset, in: denied(budget.NoTokens), want: want{retry.UnknownOutcome, codes.RetryBudgetExhausted, true}},
		"ATTEMPTING → TERMINAL_EXHAUSTED: attempt 3": {ev: status(503), in: attempt(3), want: want{retry.TerminalExhausted, codes.RetryLimitExceeded, true}},
		"attempt 3 after an ambiguous failure":       {ev: reset, in: attempt(3), want: want{retry.UnknownOutcome, codes.RetryLimitExceeded, true}},
		"attempt 2 may retry":                        {ev: status(503), in: attempt(2), want: retrying},
		"a policy not in force makes one attempt": {ev: status(503), in: func(in retry.DecisionInput) retry.DecisionInput {
			in.NotEnforced = "the policy is not published"
			return in
		}, want: want{retry.TerminalExhausted, codes.PolicyNotEnforced, false}},
		// BACKOFF_WAIT → ATTEMPTING only with more than 500 ms left once the
		// wait is over (ADV-IR-01: no retry with <= 500 ms left).
		"650 ms left, 150 ms wait: 500 at the start": {ev: status(503), in: left(650 * ms), want: want{retry.BackoffWait, "", true}},
		"649 ms left, 150 ms wait: 499 at the start": {ev: status(503), in: left(649 * ms), want: want{retry.TerminalExhausted, codes.DeadlineExceeded, true}},
		"651 ms left, 150 ms wait: 501 at the start": {ev: status(503), in: left(651 * ms), want: retrying},
		"the wait alone overruns the deadline":       {ev: status(503), in: left(100 * ms), want: want{retry.TerminalExhausted, codes.DeadlineExceeded, true}},
		"the deadline stops an ambiguous failure":    {ev: reset, in: left(600 * ms), want: want{retry.UnknownOutcome, codes.DeadlineExceeded, true}},
		// docs/runtime.md, "502": a 502 is ambiguous, as a 504 is.
		"502 is ambiguous, keyed": {ev: retry.Evidence{Class: retry.Ambiguous, Status: 502, Dispatched: true},
			want: retrying},
		"502 without replay safety": {ev: retry.Evidence{Class: retry.Ambiguous, Status: 502, Dispatched: true}, in: unsafe,
			want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		"an unlisted 502 is unknown": {ev: retry.Evidence{Class: retry.Unrecognized, Status: 502, Dispatched: true},
			want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		// A failure no transport name covers (a malformed response, an HTTP/2
		// stream reset, the caller's own cancel) after dispatch may have been
		// applied; with proof that nothing left, it is a definite failure.
		"an unnamed failure after dispatch is unknown": {ev: retry.Evidence{Class: retry.Unrecognized, Dispatched: true},
			want: want{retry.UnknownOutcome, codes.UnknownOutcome, false}},
		"an unnamed failure proven not sent is terminal": {ev: retry.Evidence{Class: retry.Unrecognized},
			want: want{retry.TerminalExhausted, codes.PermanentFailure, false}},
	} {
		in := smsInput(tc.ev)
		if tc.in != nil {
			in = tc.in(in)
		}
		check(t, name, in, tc.want)
	}
}

func unsafe(in retry.DecisionInput) retry.DecisionInput { in.ReplaySafe = false; return in }

// applied is the input after an earlier attempt may have been applied.
func applied(change func(retry.DecisionInput) retry.DecisionInput) func(retry.DecisionInput) retry.DecisionInput {
	return func(in retry.DecisionInput) retry.DecisionInput {
		in.MayHaveApplied = true
		if change != nil {
			in = change(in)
		}
		return in
	}
}

// Issue 18, item 5, and RG-LOAD ("an uncertain local outcome must trigger
// reconciliation, not an invented failure"): once an attempt may have been
// applied, whatever stops the operation ends it UNKNOWN_OUTCOME, with the
// code of the rule that stopped it; only a retry (and then a success) goes on.
func TestDecideAmbiguityIsSticky(t *testing.T) {
	unknown := func(c codes.Code, eligible bool) want { return want{retry.UnknownOutcome, c, eligible} }
	refused := retry.Evidence{Class: retry.Transient, Transport: limits.ConnectionRefused}
	for name, tc := range map[string]struct {
		in   func(retry.DecisionInput) retry.DecisionInput
		ev   retry.Evidence
		want want
	}{
		"timeout → 503 → 503: attempts spent": {ev: status(503), in: applied(attempt(3)), want: unknown(codes.RetryLimitExceeded, true)},
		"timeout → refused → refused":         {ev: refused, in: applied(attempt(3)), want: unknown(codes.RetryLimitExceeded, true)},
		"timeout → 503: the budget refuses":   {ev: status(503), in: applied(denied(budget.NoTokens)), want: unknown(codes.RetryBudgetExhausted, true)},
		"timeout → 503: the deadline":         {ev: status(503), in: applied(left(100 * ms)), want: unknown(codes.DeadlineExceeded, true)},
		"timeout → 400: a permanent answer": {ev: retry.Evidence{Class: retry.Permanent, Status: 400, Dispatched: true}, in: applied(nil),
			want: unknown(codes.PermanentFailure, false)},
		"timeout → an unlisted 500": {ev: retry.Evidence{Class: retry.Unrecognized, Status: 500, Dispatched: true}, in: applied(nil),
			want: unknown(codes.PermanentFailure, false)},
		"timeout → an unparseable Retry-After": {
			ev: retry.Evidence{Class: retry.Transient, Status: 503, Dispatched: true, RetryAfterUnparseable: true}, in: applied(nil),
			want: unknown(codes.PermanentFailure, false)},
		"timeout → 429 beyond maxDelay": {ev: retry.Evidence{Class: retry.Transient, Status: 429, Dispatched: true, RetryAfter: time.Hour}, in: applied(nil),
			want: unknown(codes.RetryAfterTooLong, true)},
		"timeout → refused, not replay safe":  {ev: refused, in: applied(unsafe), want: unknown(codes.UnknownOutcome, false)},
		"timeout → 503, keyed, may retry":     {ev: status(503), in: applied(nil), want: retrying},
		"timeout → refused, keyed, may retry": {ev: refused, in: applied(nil), want: retrying},
		"no earlier ambiguity: 503 × 3":       {ev: status(503), in: attempt(3), want: want{retry.TerminalExhausted, codes.RetryLimitExceeded, true}},
		"timeout → an unnamed failure": {ev: retry.Evidence{Class: retry.Unrecognized, Dispatched: true}, in: applied(nil),
			want: unknown(codes.PermanentFailure, false)},
	} {
		in := smsInput(tc.ev)
		if tc.in != nil {
			in = tc.in(in)
		}
		check(t, name, in, tc.want)
	}
}

func denied(d budget.Denial) func(retry.DecisionInput) retry.DecisionInput {
	return func(in retry.DecisionInput) retry.DecisionInput { in.Budget = d; return in }
}

func attempt(n int) func(retry.DecisionInput) retry.DecisionInput {
	return func(in retry.DecisionInput) retry.DecisionInput { in.Attempt = n; return in }
}

func left(d time.Duration) func(retry.DecisionInput) retry.DecisionInput {
	return func(in retry.DecisionInput) retry.DecisionInput { in.Remaining = d; return in }
}

// RG-LOAD's retry_allowed and its countermodels:
//
//	p = dict(safe=True, remaining_ms=1500, wait_ms=1000, attempt_ms=500, tokens=1)
//	retry_allowed(429, **p) is true; 400, 401, 403, 404, 422 are false;
//	and safe=False, tokens=0, remaining_ms=1499 each make 429 false.
//
// The model has no reserve beyond the attempt's own cost: MinRemaining 0.
func TestDecideSeed003Countermodels(t *testing.T) {
	p := func(ev retry.Evidence) retry.DecisionInput {
		return retry.DecisionInput{Evidence: ev, ReplaySafe: true, Attempt: 1, MaxAttempts: 3,
			Remaining: 1500 * ms, Wait: 1000 * ms, PerAttemptTimeout: 500 * ms, RetryAfterMaxDelay: 3 * time.Second,
			BudgetAsked: true, Budget: budget.Allowed}
	}
	if d := retry.Decide(p(status(429))); !d.Retry() || d.Sleep != 1000*ms {
		t.Errorf("retry_allowed(429, **p): %+v", d)
	}
	for _, code := range []int{400, 401, 403, 404, 422} {
		if d := retry.Decide(p(retry.Evidence{Class: retry.Permanent, Status: code, Dispatched: true})); d.Retry() {
			t.Errorf("retry_allowed(%d, **p) must be false: %+v", code, d)
		}
	}
	for name, change := range map[string]func(*retry.DecisionInput){
		"safe=False":        func(in *retry.DecisionInput) { in.ReplaySafe = false },
		"tokens=0":          func(in *retry.DecisionInput) { in.Budget = budget.NoTokens },
		"remaining_ms=1499": func(in *retry.DecisionInput) { in.Remaining = 1499 * ms },
	} {
		in := p(status(429))
		change(&in)
		if d := retry.Decide(in); d.Retry() {
			t.Errorf("retry_allowed(429, %s) must be false: %+v", name, d)
		}
	}
}

// The budget is asked last: Decide asks for it only when every other rule
// allows the retry, so no token is spent on a retry that could not run.
func TestDecideAsksTheBudgetLast(t *testing.T) {
	in := smsInput(status(503))
	in.BudgetAsked, in.Budget = false, ""
	if d := retry.Decide(in); !d.AskBudget || d.Retry() {
		t.Fatalf("every rule allows: %+v, want AskBudget", d)
	}
	in.Attempt = 3
	if d := retry.Decide(in); d.AskBudget || d.Code != codes.RetryLimitExceeded {
		t.Fatalf("no attempts left: %+v, want a stop without asking the budget", d)
	}
}

func TestCanStartBoundaries(t *testing.T) {
	for _, tc := range []struct {
		left, cost, reserve time.Duration
		ok                  bool
	}{
		{500 * ms, 500 * ms, 0, true},         // RG-LOAD: exactly the attempt's cost
		{499 * ms, 500 * ms, 0, false},        //
		{499 * ms, 0, 500 * ms, false},        // below the reserve (RETRY-SMS-001's 500 ms)
		{500 * ms, 0, 500 * ms, true},         // RG-LOAD's boundary: exactly the reserve
		{500 * ms, 500 * ms, 500 * ms, true},  // both at once: RG-LOAD's 1,500/1,000/500 fixture
		{499 * ms, 500 * ms, 500 * ms, false}, // and its 1,499 ms countermodel
	} {
		if got := backoff.CanStart(tc.left, tc.cost, tc.reserve); got != tc.ok {
			t.Errorf("CanStart(%v, %v, %v) = %v", tc.left, tc.cost, tc.reserve, got)
		}
	}
}
