package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

func dialRefused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func readReset() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// clientErr is http.Client's error for a request of method op ("Get",
// "Post": url.Error spells the method so).
func clientErr(op string, err error) error {
	return &url.Error{Op: op, URL: "http://telephony-api/v1/messages", Err: err}
}

func readTimeout() error { return &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}} }

// The spec's failure-mode matrix: each injected pattern, failing on every
// attempt, is routed exactly: the final state, the code, the attempts made,
// the classification of the first, and whether it was eligible for retry.
func TestFailureModeMatrix(t *testing.T) {
	// A POST with no key: no replay safety, so no retry of any kind.
	noKey := func(p *policyconfig.Payload) { p.Policy.KeyTemplate = "" }
	list502 := func(p *policyconfig.Payload) { p.Policy.RetryOnStatus = append(p.Policy.RetryOnStatus, 502) }
	for name, tc := range map[string]struct {
		err      error
		policy   func(*policyconfig.Payload)
		state    State
		code     codes.Code
		attempts int
		class    Class
	}{
		"429":                        {Status(429, ""), nil, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"503":                        {Status(503, ""), nil, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"504":                        {Status(504, ""), nil, UnknownOutcome, codes.RetryLimitExceeded, 3, Ambiguous},
		"504, POST without a key":    {Status(504, ""), noKey, UnknownOutcome, codes.UnknownOutcome, 1, Ambiguous},
		"503, POST without a key":    {Status(503, ""), noKey, TerminalExhausted, codes.AmbiguousWithoutIdempotency, 1, Transient},
		"reset before send":          {NotDispatched(readReset()), nil, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"reset before send, no key":  {NotDispatched(readReset()), noKey, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"refused, no key":            {dialRefused(), noKey, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"reset after send, keyed":    {readReset(), nil, UnknownOutcome, codes.RetryLimitExceeded, 3, Ambiguous},
		"reset after send, no key":   {readReset(), noKey, UnknownOutcome, codes.UnknownOutcome, 1, Ambiguous},
		"EOF after send, keyed":      {io.ErrUnexpectedEOF, nil, UnknownOutcome, codes.RetryLimitExceeded, 3, Ambiguous},
		"EOF after send, no key":     {io.EOF, noKey, UnknownOutcome, codes.UnknownOutcome, 1, Ambiguous},
		"connect refused":            {dialRefused(), nil, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"DNS failure":                {&net.DNSError{Err: "no such host", Name: "telephony-api"}, nil, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"read timeout with a key":    {readTimeout(), nil, UnknownOutcome, codes.RetryLimitExceeded, 3, Ambiguous},
		"read timeout without key":   {readTimeout(), noKey, UnknownOutcome, codes.UnknownOutcome, 1, Ambiguous},
		"400":                        {Status(400, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"401":                        {Status(401, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"403":                        {Status(403, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"404":                        {Status(404, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"422":                        {Status(422, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"an unknown 418":             {Status(418, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"an unlisted 500":            {Status(500, ""), nil, TerminalExhausted, codes.PermanentFailure, 1, Unrecognized},
		"an unparseable Retry-After": {Status(503, "soon-ish"), nil, TerminalExhausted, codes.PermanentFailure, 1, Transient},
		"Retry-After above maxDelay": {Status(429, "10"), nil, TerminalExhausted, codes.RetryAfterTooLong, 1, Transient},
		// An error no transport name covers, without proof that the request
		// never left, may have been applied (RG-LOAD): unknown, not failed.
		"an unrecognized error":                  {errors.New("the SDK said no"), nil, UnknownOutcome, codes.UnknownOutcome, 1, Unrecognized},
		"an unrecognized error, proven not sent": {NotDispatched(errors.New("the SDK said no")), nil, TerminalExhausted, codes.PermanentFailure, 1, Unrecognized},
		"the caller's cancel":                    {context.Canceled, nil, UnknownOutcome, codes.UnknownOutcome, 1, Unrecognized},
		"502":                                    {Status(502, ""), list502, UnknownOutcome, codes.RetryLimitExceeded, 3, Ambiguous},
		"502, POST without a key": {Status(502, ""), func(p *policyconfig.Payload) { list502(p); noKey(p) },
			UnknownOutcome, codes.UnknownOutcome, 1, Ambiguous},
		"an unlisted 502": {Status(502, ""), nil, UnknownOutcome, codes.UnknownOutcome, 1, Unrecognized},
		// http.Client's errors (docs/runtime.md, "Do and net/http"): a refusal
		// of a request net/http may have sent and re-sent is no proof.
		"http.Client: refused, keyed POST":   {clientErr("Post", dialRefused()), nil, UnknownOutcome, codes.RetryLimitExceeded, 3, Ambiguous},
		"http.Client: refused, keyless GET":  {clientErr("Get", dialRefused()), noKey, UnknownOutcome, codes.UnknownOutcome, 1, Ambiguous},
		"http.Client: refused, keyless POST": {clientErr("Post", dialRefused()), noKey, TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"http.Client: the operation's own proof": {NotDispatched(clientErr("Post", dialRefused())), nil,
			TerminalExhausted, codes.RetryLimitExceeded, 3, Transient},
		"a listed 400 stays permanent": {Status(400, ""), func(p *policyconfig.Payload) {
			p.Policy.RetryOnStatus = append(p.Policy.RetryOnStatus, 400) // a forged payload
		}, TerminalExhausted, codes.PermanentFailure, 1, Permanent},
		"an unlisted timeout after send": {readTimeout(), func(p *policyconfig.Payload) {
			p.Policy.RetryOnErrors = []string{"ConnectionRefused"}
		}, UnknownOutcome, codes.UnknownOutcome, 1, Unrecognized},
	} {
		t.Run(name, func(t *testing.T) {
			p := smsPolicy()
			if tc.policy != nil {
				tc.policy(p)
			}
			letters := &memoryLetters{}
			ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(letters))
			warm(ex, p.Policy.Name, 30)
			var keys []string
			err := ex.Do(context.Background(), p.Policy.Name, smsVars, func(_ context.Context, a Attempt) error {
				keys = append(keys, a.Key)
				return tc.err
			})
			var re *Error
			if !errors.As(err, &re) {
				t.Fatalf("want *Error, got %v", err)
			}
			if re.State != tc.state || re.Code != tc.code || re.Attempts != tc.attempts || len(keys) != tc.attempts {
				t.Fatalf("got %s/%s after %d attempts (%d calls), want %s/%s after %d: %v",
					re.State, re.Code, re.Attempts, len(keys), tc.state, tc.code, tc.attempts, err)
			}
			if !errors.Is(err, ErrNotCompleted) || !errors.Is(err, Sentinel(tc.code)) {
				t.Errorf("errors.Is does not match the code: %v", err)
			}
			letter := letters.all()
			if len(letter) != 1 || letter[0].State != tc.state || len(letter[0].Attempts) != tc.attempts {
				t.Fatalf("dead letters %+v", letter)
			}
			first := letter[0].Attempts[0]
			if first.Evidence.Class != tc.class {
				t.Errorf("first attempt classified %s, want %s", first.Evidence.Class, tc.class)
			}
			wantEligible := tc.attempts > 1 || tc.code == codes.RetryAfterTooLong
			if first.RetryEligible != wantEligible || first.BudgetConsumed != (tc.attempts > 1) {
				t.Errorf("first record %+v", first)
			}
			if tc.policy == nil && tc.attempts > 0 {
				for _, k := range keys {
					if k != "SMS-2FA-42-s-9" {
						t.Errorf("attempt carried key %q", k)
					}
				}
			}
		})
	}
}

func TestSuccessOnTheSecondAttempt(t *testing.T) {
	p := smsPolicy()
	letters := &memoryLetters{}
	sink := NewChannelSink(16)
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(letters))
	warm(ex, p.Policy.Name, 30)
	ex.events = sink
	calls := 0
	err := ex.Do(context.Background(), p.Policy.Name, smsVars, func(context.Context, Attempt) error {
		calls++
		if calls == 1 {
			return Status(503, "")
		}
		return nil
	})
	if err != nil || calls != 2 || len(letters.all()) != 0 {
		t.Fatalf("err %v, calls %d, letters %d", err, calls, len(letters.all()))
	}
	close(sink.C)
	var states []State
	for ev := range sink.C {
		states = append(states, ev.To)
		if ev.Topic != "auth.sms.lifecycle.v1" || ev.Key != "SMS-2FA-42-s-9" {
			t.Errorf("event %+v", ev)
		}
	}
	want := []State{Submitted, Attempting, BackoffWait, Attempting, Dispatched}
	if len(states) != len(want) {
		t.Fatalf("transitions %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("transitions %v, want %v", states, want)
		}
	}
}

func TestRetryAfterIsHonouredAsAFloor(t *testing.T) {
	p := smsPolicy()
	clk := clock.NewVirtual(epoch)
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clk))
	warm(ex, p.Policy.Name, 30)
	var at []time.Time
	_ = ex.Do(context.Background(), p.Policy.Name, smsVars, func(context.Context, Attempt) error {
		at = append(at, clk.Now())
		if len(at) == 1 {
			return Status(429, "2")
		}
		return nil
	})
	if len(at) != 2 || at[1].Sub(at[0]) < 2*time.Second {
		t.Fatalf("the retry came %v after a Retry-After of 2s", at[1].Sub(at[0]))
	}
	for v, want := range map[string]time.Duration{
		epoch.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		epoch.Add(-time.Minute).Format(http.TimeFormat):     0, // past: retry now, by the backoff
		"3":                          3 * time.Second,
		" 7 ":                        7 * time.Second,
		"99999999999999999999999999": maxRetryAfter,
	} {
		if d, ok := parseRetryAfter(v, epoch); !ok || d != want {
			t.Errorf("Retry-After %q: %v %v, want %v", v, d, ok, want)
		}
	}
	for _, v := range []string{"-5", "+5", "1.5", "soon", "", "5s", "Sun, 99 Nov 2026"} {
		if _, ok := parseRetryAfter(v, epoch); ok {
			t.Errorf("Retry-After %q parsed", v)
		}
	}
}

func TestMissingKeyVariableFailsBeforeAnyAttempt(t *testing.T) {
	p := smsPolicy()
	ex := New(staticSource{p.Policy.Name: p})
	called := false
	err := ex.Do(context.Background(), p.Policy.Name, Vars{"user_id": "42"}, func(context.Context, Attempt) error {
		called = true
		return nil
	})
	if called || !errors.Is(err, Sentinel(codes.MissingKeyVariable)) {
		t.Fatalf("called %v, err %v", called, err)
	}
}

func TestUnknownAndNoRetryPoliciesGetOneAttempt(t *testing.T) {
	noRetry := smsPolicy()
	noRetry.Enforcement = policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: "BudgetNotFound"}
	ex := New(staticSource{"no-retry": noRetry}, WithClock(clock.NewVirtual(epoch)))
	for _, name := range []string{"no-retry", "never-published"} {
		calls := 0
		err := ex.Do(context.Background(), name, smsVars, func(context.Context, Attempt) error {
			calls++
			return Status(503, "")
		})
		if calls != 1 || !errors.Is(err, Sentinel(codes.PolicyNotEnforced)) {
			t.Errorf("%s: %d calls, %v", name, calls, err)
		}
	}
}

func TestBudgetExhaustionEndsInBudgetExhausted(t *testing.T) {
	p := smsPolicy()
	p.Budget.MaxTokens = 1
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(letters))
	for range 200 { // enough primaries that the ratio is not what stops retries
		_ = ex.Do(context.Background(), p.Policy.Name, smsVars, func(context.Context, Attempt) error { return nil })
	}
	var last error
	for range 5 {
		last = ex.Do(context.Background(), p.Policy.Name, smsVars, func(context.Context, Attempt) error { return Status(503, "") })
	}
	var re *Error
	if !errors.As(last, &re) || re.State != BudgetExhausted || re.Code != codes.RetryBudgetExhausted {
		t.Fatalf("%v", last)
	}
	if n := len(letters.all()); n != 5 {
		t.Fatalf("%d dead letters for 5 failed operations", n)
	}
}
