package retry_test

// Each test here reads one sentence of RETRY-SMS-001 or of the
// layered-budget rules (RG-LOAD) and checks it the way an application
// would: through New, Do and the RoundTripper, nothing unexported.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
)

type source map[string]*policyconfig.Payload

func (s source) Policy(name string) (*policyconfig.Payload, bool) {
	p, ok := s[name]
	return p, ok
}

var vars = retry.Vars{"user_id": "42", "login_session_id": "s-9"}

type letters struct {
	mu  sync.Mutex
	all []retry.DeadLetter
}

func (l *letters) Write(_ context.Context, d retry.DeadLetter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, d)
	return nil
}

func (l *letters) list() []retry.DeadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]retry.DeadLetter(nil), l.all...)
}

// run makes one operation whose attempts return fail(n) in turn, each
// taking cost of the virtual clock. It returns the error and the attempts.
func run(t *testing.T, ex *retry.Executor, clk *clock.Virtual, p *policyconfig.Payload, cost time.Duration, fail func(n int) error) (*retry.Error, int) {
	t.Helper()
	calls := 0
	err := ex.Do(context.Background(), p.Policy.Name, vars, func(context.Context, retry.Attempt) error {
		calls++
		if clk != nil {
			clk.Advance(cost)
		}
		return fail(calls)
	})
	if err == nil {
		return nil, calls
	}
	var re *retry.Error
	if !errors.As(err, &re) {
		t.Fatalf("want a *retry.Error, got %v", err)
	}
	return re, calls
}

// RETRY-SMS-001 MC-ST-01: BACKOFF_WAIT → ATTEMPTING only when the sleep has
// elapsed and the deadline remaining holds minRemaining (500 ms); RG-LOAD
// fixes the boundary: exactly 500 ms left after the wait is allowed, 499 ms
// is not. The wait is pinned by Retry-After: 1 and a backoff draw of its
// minimum.
func TestARetryStartsOnlyAboveMinRemaining(t *testing.T) {
	for _, tc := range []struct {
		spent time.Duration // by the first attempt, of the 4 s deadline
		retry bool
	}{
		{spent: 2500 * time.Millisecond, retry: true},  // 1,500 left, 500 after the wait: RG-LOAD's boundary
		{spent: 2501 * time.Millisecond, retry: false}, // 1,499 left, 499 after the wait
		{spent: 2900 * time.Millisecond, retry: false}, // 100 after the wait: the old check let it start
	} {
		p := fixtures.SMS()
		clk := clock.NewVirtual(time.Now())
		ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk), retry.WithRand(func(int64) int64 { return 0 }))
		warm(t, ex, p)
		var started []time.Duration
		begin := clk.Now()
		re, calls := run(t, ex, nil, p, 0, func(n int) error {
			started = append(started, p.Policy.Deadline.D()-clk.Now().Sub(begin))
			if n == 1 {
				clk.Advance(tc.spent)
				return retry.Status(429, "1")
			}
			return nil
		})
		if got := calls == 2; got != tc.retry {
			t.Errorf("%v spent: retried %v, want %v (%v)", tc.spent, got, tc.retry, re)
		}
		if len(started) > 1 && started[1] < p.Policy.MinRemaining.D() {
			t.Errorf("%v spent: a retry started with %v left", tc.spent, started[1])
		}
		if !tc.retry && (re == nil || re.Code != codes.DeadlineExceeded) {
			t.Errorf("%v spent: %v, want ERR_DEADLINE_EXCEEDED", tc.spent, re)
		}
	}
}

// RG-LOAD's fixture: 1,500 ms left, a 1,000 ms wait and a 500 ms attempt
// is allowed; at 1,499 ms it is denied. The attempt's cost is the policy's
// perAttemptTimeout, and the sample's 500 ms minRemaining is kept.
func TestSeed003DeadlineBoundary(t *testing.T) {
	for _, tc := range []struct {
		left  time.Duration
		retry bool
	}{{1500 * time.Millisecond, true}, {1499 * time.Millisecond, false}} {
		p := fixtures.SMS()
		p.Policy.PerAttemptTimeout = fixtures.D("500ms")
		clk := clock.NewVirtual(time.Now())
		ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk), retry.WithRand(func(int64) int64 { return 0 }))
		warm(t, ex, p)
		_, calls := run(t, ex, nil, p, 0, func(n int) error {
			if n == 1 {
				clk.Advance(p.Policy.Deadline.D() - tc.left)
				return retry.Status(429, "1")
			}
			return nil
		})
		if got := calls == 2; got != tc.retry {
			t.Errorf("%v left: retried %v, want %v", tc.left, got, tc.retry)
		}
	}
}

// A caller's context deadline is read on the executor's clock, not the
// wall clock: 200 ms left on the injected clock means no retry.
func TestTheCallersDeadlineIsReadOnTheInjectedClock(t *testing.T) {
	p := fixtures.SMS()
	clk := clock.NewVirtual(time.Now())
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk))
	warm(t, ex, p)
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(1200*time.Millisecond))
	defer cancel()
	calls := 0
	err := ex.Do(ctx, p.Policy.Name, vars, func(context.Context, retry.Attempt) error {
		calls++
		clk.Advance(time.Second)
		return retry.Status(503, "")
	})
	if calls != 1 || !errors.Is(err, retry.Sentinel(codes.DeadlineExceeded)) {
		t.Fatalf("%d attempts with 200 ms of the caller's deadline left: %v", calls, err)
	}
}

// RETRY-SMS-001 MC-FM-01: unparseable headers are a non-retryable terminal
// failure. A valid Retry-After (a date in the past included) is not.
func TestAnUnparseableRetryAfterIsTerminal(t *testing.T) {
	for header, want := range map[string]int{"soon-ish": 1, "-5": 1, "1.5": 1, "   ": 1, "0": 2,
		time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat): 2} {
		p := fixtures.SMS()
		clk := clock.NewVirtual(time.Now())
		ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk))
		warm(t, ex, p)
		re, calls := run(t, ex, clk, p, 10*time.Millisecond, func(n int) error {
			if n == 1 {
				return retry.Status(503, header)
			}
			return nil
		})
		if calls != want {
			t.Errorf("Retry-After %q: %d attempts, want %d (%v)", header, calls, want, re)
		}
		if want == 1 && (re == nil || re.State != retry.TerminalExhausted) {
			t.Errorf("Retry-After %q: %v, want TERMINAL_EXHAUSTED", header, re)
		}
	}
}

// warm runs 30 successful operations, so that no test but the cold-start
// one depends on how a new budget treats a process with no traffic.
func warm(t *testing.T, ex *retry.Executor, p *policyconfig.Payload) {
	for range 30 {
		run(t, ex, nil, p, 0, func(int) error { return nil })
	}
}

// warmWithEvents is a warmed executor of p on clk whose sink holds only the
// events that come after the warm-up.
func warmWithEvents(t *testing.T, p *policyconfig.Payload, clk clock.Clock) (*retry.Executor, *retry.ChannelSink) {
	sink := retry.NewChannelSink(256)
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk), retry.WithEventSink(sink))
	warm(t, ex, p)
	for len(sink.C) > 0 {
		<-sink.C
	}
	return ex, sink
}

func resetAfterWrite() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// A connection dropped after the request was sent is the textbook
// ambiguous outcome: retried with replay safety, UNKNOWN_OUTCOME without,
// never a permanent failure.
func TestADroppedConnectionIsAmbiguous(t *testing.T) {
	for name, drop := range map[string]error{
		"EOF":                 io.EOF,
		"unexpected EOF":      io.ErrUnexpectedEOF,
		"wrapped EOF":         fmt.Errorf("readLoop: %w", io.EOF),
		"reset after write":   resetAfterWrite(),
		"url.Error around it": &urlError{io.ErrUnexpectedEOF},
	} {
		for _, keyed := range []bool{true, false} {
			p := fixtures.SMS()
			if !keyed {
				p.Policy.KeyTemplate = ""
			}
			lt := &letters{}
			ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())), retry.WithDeadLetters(lt))
			warm(t, ex, p)
			re, calls := run(t, ex, nil, p, 0, func(int) error { return drop })
			want := 1
			if keyed {
				want = 3
			}
			if re == nil || calls != want || re.State != retry.UnknownOutcome || re.Code == codes.PermanentFailure {
				t.Errorf("%s, keyed %v: %d attempts, %v; want %d attempts ending UNKNOWN_OUTCOME", name, keyed, calls, re, want)
				continue
			}
			if l := lt.list(); len(l) != 1 || l[0].State != retry.UnknownOutcome {
				t.Errorf("%s, keyed %v: dead letters %+v", name, keyed, l)
			}
		}
	}
}

type urlError struct{ err error }

func (e *urlError) Error() string { return "Post \"https://x\": " + e.err.Error() }
func (e *urlError) Unwrap() error { return e.err }

// The same through the RoundTripper and a real connection: the vendor reads
// the whole request, then hangs up without answering.
func TestRoundTripperHangUpAfterTheRequestIsAmbiguous(t *testing.T) {
	var mu sync.Mutex
	seen := 0
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		mu.Lock()
		seen++
		mu.Unlock()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer vendor.Close()
	p := fixtures.SMS()
	p.Policy.KeyTemplate = "" // a POST with no key: the drop must not be replayed
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())))
	rt := &retry.RoundTripper{Executor: ex, Policy: p.Policy.Name, Base: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest(http.MethodPost, vendor.URL+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
	res, err := rt.RoundTrip(req)
	if res != nil {
		_ = res.Body.Close()
	}
	var re *retry.Error
	if !errors.As(err, &re) || re.State != retry.UnknownOutcome || re.Code != codes.UnknownOutcome {
		t.Fatalf("a hang-up after the request: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen != 1 {
		t.Fatalf("the vendor saw %d requests, want 1", seen)
	}
}

// RG-LOAD: retry_allowed(429, safe=False, ...) is false. A retry of a
// request that reached the dependency needs safe repeat semantics: an
// idempotent method or a key. Proof that it never left needs none (RG-RETRY:
// "proven non-dispatch ... can permit another attempt even without a server
// retryability flag"; RG-LAYERS: "the connector can handle a connection
// refused before any request left the process").
func TestARetryNeedsReplaySafety(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for name, tc := range map[string]struct {
		operation, key string
		fail           error
		attempts       int
	}{
		"POST, no key, 429":        {"POST /v1/messages", "", retry.Status(429, ""), 1},
		"POST, no key, 503":        {"POST /v1/messages", "", retry.Status(503, ""), 1},
		"POST, keyed, 503":         {"POST /v1/messages", "K-{user_id}", retry.Status(503, ""), 2},
		"GET, no key, 503":         {"GET /v1/balance", "", retry.Status(503, ""), 2},
		"POST, no key, refused":    {"POST /v1/messages", "", refused, 2},
		"POST, no key, DNS":        {"POST /v1/messages", "", &net.DNSError{Err: "no such host", Name: "telephony-api"}, 2},
		"POST, no key, not sent":   {"POST /v1/messages", "", retry.NotDispatched(io.ErrUnexpectedEOF), 2},
		"GET, no key, refused":     {"GET /v1/balance", "", refused, 2},
		"POST, no key, a 400 stop": {"POST /v1/messages", "", retry.Status(400, ""), 1},
	} {
		p := fixtures.SMS()
		p.Policy.Operation, p.Policy.KeyTemplate = tc.operation, tc.key
		ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())))
		warm(t, ex, p)
		re, calls := run(t, ex, nil, p, 0, func(n int) error {
			if n == 1 {
				return tc.fail
			}
			return nil
		})
		if calls != tc.attempts {
			t.Errorf("%s: %d attempts, want %d (%v)", name, calls, tc.attempts, re)
		}
		if tc.attempts == 1 && (re == nil || re.State != retry.TerminalExhausted) {
			t.Errorf("%s: %v, want TERMINAL_EXHAUSTED", name, re)
		}
	}
}

// A freshly started process retries its first failure: a new budget starts
// full, as gRPC's throttling and the AWS SDK's standard mode do.
func TestANewExecutorRetriesItsFirstFailure(t *testing.T) {
	p := fixtures.SMS()
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())))
	re, calls := run(t, ex, nil, p, 0, func(n int) error {
		if n == 1 {
			return retry.Status(503, "")
		}
		return nil
	})
	if re != nil || calls != 2 {
		t.Fatalf("the first call of a new executor: %d attempts, %v", calls, re)
	}
}

// A cancel during backoff ends the operation from BACKOFF_WAIT: no
// ATTEMPTING event without an attempt.
func TestACancelDuringBackoffStartsNoAttempt(t *testing.T) {
	p := fixtures.SMS()
	clk := clock.NewFake(time.Now())
	ex, sink := warmWithEvents(t, p, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ex.Do(ctx, p.Policy.Name, vars, func(context.Context, retry.Attempt) error { return retry.Status(503, "") })
	}()
	for clk.Sleepers() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the operation ended before a backoff: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	err := <-done
	close(sink.C)
	var events []retry.Event
	for ev := range sink.C {
		events = append(events, ev)
	}
	attempting := 0
	for _, ev := range events {
		if ev.To == retry.Attempting {
			attempting++
		}
	}
	last := events[len(events)-1]
	if attempting != 1 || last.From != retry.BackoffWait || !last.To.Terminal() || last.Attempt != 1 {
		t.Fatalf("events %+v (err %v): want one ATTEMPTING, then BACKOFF_WAIT → a terminal state", events, err)
	}
}

// An ambiguous failure the budget refuses has an unknown outcome: it ends
// UNKNOWN_OUTCOME, and its record carries the budget's refusal.
func TestAnAmbiguousFailureTheBudgetRefusesEndsUnknown(t *testing.T) {
	p := fixtures.SMS()
	p.Budget.MaxTokens = 1
	lt := &letters{}
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())), retry.WithDeadLetters(lt))
	for range 30 { // primaries for the ratio; the bucket stays at its one token
		run(t, ex, nil, p, 0, func(int) error { return nil })
	}
	// Spend the token on a retry that succeeds (a retried success deposits nothing).
	if re, calls := run(t, ex, nil, p, 0, func(n int) error {
		if n == 1 {
			return retry.Status(503, "")
		}
		return nil
	}); re != nil || calls != 2 {
		t.Fatalf("spending the token: %d attempts, %v", calls, re)
	}
	re, calls := run(t, ex, nil, p, 0, func(int) error { return resetAfterWrite() })
	if re == nil || calls != 1 || re.State != retry.UnknownOutcome || re.Code != codes.RetryBudgetExhausted {
		t.Fatalf("an ambiguous failure with no token: %d attempts, %v", calls, re)
	}
	l := lt.list()
	if len(l) != 1 || l[0].State != retry.UnknownOutcome || l[0].Attempts[0].BudgetDenied == "" {
		t.Fatalf("dead letter %+v: want UNKNOWN_OUTCOME with the budget's denial", l)
	}
}

// RETRY-SMS-001 ADV-IR-01: the interceptor rejects any attempt beyond the limit
// with ERR_RETRY_LIMIT_EXCEEDED.
func TestSpentAttemptsEndWithRetryLimitExceeded(t *testing.T) {
	p := fixtures.SMS()
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())))
	warm(t, ex, p)
	re, calls := run(t, ex, nil, p, 0, func(int) error { return retry.Status(503, "") })
	if calls != 3 || re == nil || re.Code != codes.RetryLimitExceeded || !errors.Is(re, retry.Sentinel(codes.RetryLimitExceeded)) {
		t.Fatalf("%d attempts: %v", calls, re)
	}
	if got := re.Problem(); got.Code != "ERR_RETRY_LIMIT_EXCEEDED" || got.Status != http.StatusBadGateway {
		t.Fatalf("problem %+v", got)
	}
}

// A rendered key has a size cap and must be a valid header value; above
// the cap, or with a control character, Do fails before any attempt with a
// clear error. A template that cannot render at all never means zero
// attempts: the policy falls back to one attempt.
func TestRenderedKeysAreCappedAndTemplatesNeverMeanZeroAttempts(t *testing.T) {
	p := fixtures.SMS()
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())))
	for name, v := range map[string]retry.Vars{
		"too long": {"user_id": strings.Repeat("9", limits.MaxIdempotencyKeyLength), "login_session_id": "s"},
		"CRLF":     {"user_id": "42\r\nX-Admin: yes", "login_session_id": "s"},
	} {
		calls := 0
		err := ex.Do(context.Background(), p.Policy.Name, v, func(context.Context, retry.Attempt) error { calls++; return nil })
		if calls != 0 || !errors.Is(err, retry.Sentinel(codes.InvalidKeyTemplate)) {
			t.Errorf("%s: %d attempts, %v", name, calls, err)
		}
	}
	longest := strings.Repeat("9", limits.MaxIdempotencyKeyLength-len("SMS-2FA--s"))
	if err := ex.Do(context.Background(), p.Policy.Name, retry.Vars{"user_id": longest, "login_session_id": "s"}, ok); err != nil {
		t.Errorf("a key of exactly %d bytes: %v", limits.MaxIdempotencyKeyLength, err)
	}
	for _, tmpl := range []string{"SMS-{user_id", "SMS-{}", "SMS-{a{b}", strings.Repeat("K", limits.MaxIdempotencyKeyLength) + "{user_id}"} {
		broken := fixtures.SMS()
		broken.Policy.KeyTemplate = tmpl
		ex := retry.New(source{broken.Policy.Name: broken}, retry.WithClock(clock.NewVirtual(time.Now())))
		re, calls := run(t, ex, nil, broken, 0, func(int) error { return retry.Status(503, "") })
		if calls != 1 || re == nil || re.Code != codes.PolicyNotEnforced {
			t.Errorf("template %q: %d attempts, %v; want one attempt", tmpl, calls, re)
		}
	}
}

func ok(context.Context, retry.Attempt) error { return nil }

// MC-PO-01: only a primary success deposits 0.1 token. A success that
// needed a retry pays its token and deposits nothing.
func TestOnlyAPrimarySuccessDeposits(t *testing.T) {
	p := fixtures.SMS()
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clock.NewVirtual(time.Now())))
	b, found := ex.Budget(p.Policy.Name)
	if !found || b.Tokens() != 10 {
		t.Fatalf("the policy's budget: %v, %v tokens", found, b.Tokens())
	}
	run(t, ex, nil, p, 0, func(n int) error {
		if n == 1 {
			return retry.Status(503, "")
		}
		return nil
	})
	if b.Tokens() != 9 {
		t.Fatalf("after a success on the second attempt: %v tokens, want 9", b.Tokens())
	}
	run(t, ex, nil, p, 0, func(int) error { return nil })
	if b.Tokens() != 9.1 {
		t.Fatalf("after a primary success: %v tokens, want 9.1", b.Tokens())
	}
}

// A payload cannot rewrite another policy's budget: a second policy naming
// the same budget with other figures under the same generation changes
// nothing for the first; a newer generation's figures apply to both.
func TestAPayloadCannotRewriteAnotherPolicysBudget(t *testing.T) {
	first, second := fixtures.Named("sms-2fa-dispatch", 1), fixtures.Named("sms-resend", 1)
	second.Budget.MaxTokens, second.Budget.RetryPercent = 1, 100
	src := source{first.Policy.Name: first, second.Policy.Name: second}
	ex := retry.New(src, retry.WithClock(clock.NewVirtual(time.Now())))
	b, _ := ex.Budget(first.Policy.Name)
	other, _ := ex.Budget(second.Policy.Name)
	if other != b || b.Tokens() != 10 {
		t.Fatalf("same budget %v; the first policy's tokens %v, want 10", other == b, b.Tokens())
	}
	for range 10 { // the first policy's figures: ten retries from a full bucket
		if re, calls := run(t, ex, nil, first, 0, func(n int) error {
			if n == 1 {
				return retry.Status(503, "")
			}
			return nil
		}); calls != 2 {
			t.Fatalf("the first policy's retries: %v", re)
		}
	}
	newer := fixtures.Named("sms-resend", 2)
	newer.Budget.Generation, newer.Budget.MaxTokens = 2, 3
	src[newer.Policy.Name] = newer
	if nb, _ := ex.Budget(newer.Policy.Name); nb != b {
		t.Fatal("a newer generation keeps the one budget")
	}
	run(t, ex, nil, first, 0, func(int) error { return nil })
	run(t, ex, nil, first, 0, func(int) error { return nil })
	if b.Tokens() != 0.2 {
		t.Fatalf("after two primary successes at the newest generation's 10%%: %v tokens", b.Tokens())
	}
}

// WithClock reaches the budget registry the executor creates: the start
// credit leaves the window on the injected clock, and with it the cold
// allowance.
func TestWithClockReachesTheBudget(t *testing.T) {
	p := fixtures.SMS()
	clk := clock.NewVirtual(time.Now())
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk))
	if _, found := ex.Budget(p.Policy.Name); !found {
		t.Fatal("no budget")
	}
	clk.Advance(p.Budget.Window.D())
	re, calls := run(t, ex, nil, p, 0, func(int) error { return retry.Status(503, "") })
	if calls != 1 || re == nil || re.State != retry.BudgetExhausted {
		t.Fatalf("a window later on the injected clock, with one primary: %d attempts, %v", calls, re)
	}
}

type ctxLetters struct {
	deadline time.Time
	bounded  bool
	err      error
}

func (c *ctxLetters) Write(ctx context.Context, _ retry.DeadLetter) error {
	c.deadline, c.bounded = ctx.Deadline()
	c.err = ctx.Err()
	return nil
}

// The dead-letter sink gets a context that ends with the operation's
// deadline, and that a caller's cancel does not end: a cancelled operation
// still owes its record.
func TestTheDeadLetterContextEndsWithTheOperation(t *testing.T) {
	p := fixtures.SMS()
	clk := clock.NewFake(time.Now())
	sink := &ctxLetters{}
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk), retry.WithDeadLetters(sink))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	before := time.Now()
	go func() {
		done <- ex.Do(ctx, p.Policy.Name, vars, func(context.Context, retry.Attempt) error { return retry.Status(503, "") })
	}()
	for clk.Sleepers() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if !sink.bounded || sink.err != nil || sink.deadline.After(before.Add(p.Policy.Deadline.D()+time.Second)) {
		t.Fatalf("the sink's context: deadline %v (bounded %v), err %v", sink.deadline.Sub(before), sink.bounded, sink.err)
	}
}

// minRemaining holds when the next attempt would start, on the clock: a
// backoff that overran what the decision foresaw (here the clock jumps
// 3.6 s during a wait of at most 200 ms) starts no attempt, and the
// operation ends from BACKOFF_WAIT.
func TestAWaitThatOverrunsStartsNoAttempt(t *testing.T) {
	p := fixtures.SMS()
	clk := clock.NewFake(time.Now())
	ex, sink := warmWithEvents(t, p, clk)
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- ex.Do(context.Background(), p.Policy.Name, vars, func(context.Context, retry.Attempt) error {
			calls++
			return retry.Status(503, "")
		})
	}()
	for clk.Sleepers() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the operation ended before a backoff: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	clk.Advance(3600 * time.Millisecond)
	err := <-done
	close(sink.C)
	var last retry.Event
	for ev := range sink.C {
		last = ev
	}
	if calls != 1 || !errors.Is(err, retry.Sentinel(codes.DeadlineExceeded)) || last.From != retry.BackoffWait || last.To != retry.TerminalExhausted {
		t.Fatalf("%d attempts, %v, last event %s → %s", calls, err, last.From, last.To)
	}
}

// An operation that knows it can send no further attempt (grpc-go retried
// the call by itself below it, say) says so with Final: Do makes no attempt
// the dependency did not receive, asks the budget for none, waits no
// backoff, and the caller still sees the dependency's own status.
func TestAFinalAttemptEndsTheOperationAsItIs(t *testing.T) {
	p := fixtures.SMS()
	clk := clock.NewVirtual(time.Now())
	ex := retry.New(source{p.Policy.Name: p}, retry.WithClock(clk))
	warm(t, ex, p)
	b, _ := ex.Budget(p.Policy.Name)
	tokens := b.Tokens()
	start := clk.Now()
	re, calls := run(t, ex, nil, p, 0, func(int) error { return retry.Final(retry.Status(503, ""), "grpc-go retried the call itself") })
	if calls != 1 || re == nil || re.Attempts != 1 || re.Code != codes.RetryLimitExceeded {
		t.Fatalf("%d calls: %v", calls, re)
	}
	var se *retry.StatusError
	if !errors.As(re, &se) || se.Code != 503 || !strings.Contains(re.Detail, "grpc-go retried the call itself") {
		t.Fatalf("the status and the reason are lost: %v", re)
	}
	if got := b.Tokens(); got != tokens {
		t.Fatalf("the budget was asked: tokens %v -> %v", tokens, got)
	}
	if waited := clk.Now().Sub(start); waited != 0 {
		t.Fatalf("a backoff of %s was waited", waited)
	}
}
