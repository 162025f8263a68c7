package retrygrpc_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	"github.com/retryguard/retryguard/runtime/retry"
)

func retryError(t *testing.T, err error) *retry.Error {
	t.Helper()
	var re *retry.Error
	if !errors.As(err, &re) {
		t.Fatalf("want a *retry.Error, got %T: %v", err, err)
	}
	return re
}

func always(code grpccodes.Code) func(context.Context, int) error {
	return func(context.Context, int) error { return status.Error(code, "injected") }
}

// An UNAVAILABLE storm gets the policy's attempts, three, and no more (INV-RTY-01),
// every one with the same key in its metadata (INV-RTY-05).
func TestUnavailableStormGetsThePolicysAttemptsWithOneKey(t *testing.T) {
	h := &health{answer: always(grpccodes.Unavailable)}
	ic, _, clk := guarded(grpcPolicy())
	err := check(dial(t, serve(t, h), ic.DialOptions()...))

	re := retryError(t, err)
	if re.Code != codes.RetryLimitExceeded || re.State != retry.TerminalExhausted || re.Attempts != 3 {
		t.Fatalf("got %s %s after %d attempts, want ERR_RETRY_LIMIT_EXCEEDED TERMINAL_EXHAUSTED after 3: %v", re.Code, re.State, re.Attempts, err)
	}
	if re.Last.Status != 503 || !re.Last.Dispatched {
		t.Errorf("last evidence %+v, want the server's UNAVAILABLE as a dispatched 503", re.Last)
	}
	if got := status.Code(err); got != grpccodes.Unavailable {
		t.Errorf("status.Code(err) = %s, want the last attempt's Unavailable", got)
	}
	keys, _ := h.seen()
	if len(keys) != 3 {
		t.Fatalf("the server received %d calls, want 3", len(keys))
	}
	for i, k := range keys {
		if !slices.Equal(k, []string{smsKey}) {
			t.Errorf("call %d carried idempotency-key %q, want exactly [%s]", i+1, k, smsKey)
		}
	}
	if w := clk.all(); len(w) != 2 || w[0] > 200*time.Millisecond || w[1] > 400*time.Millisecond {
		t.Errorf("backoffs %v, want two full-jitter draws within 200ms and 400ms", w)
	}
}

// A key the caller put in the metadata is replaced, not joined: the
// dependency deduplicates on the policy's key.
func TestThePolicysKeyReplacesTheCallersMetadata(t *testing.T) {
	h := &health{}
	ic, _, _ := guarded(grpcPolicy())
	client := dial(t, serve(t, h), ic.DialOptions()...)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "stale", "x-trace", "t-1")
	if _, err := client.Check(ctx, nil, retrygrpc.WithVars(smsVars)); err != nil {
		t.Fatal(err)
	}
	if keys, _ := h.seen(); !slices.Equal(keys[0], []string{smsKey}) {
		t.Errorf("idempotency-key %q, want [%s]", keys[0], smsKey)
	}
}

// Permanent statuses end after one attempt, and the caller gets the server's
// own status, as the RoundTripper returns a 4xx response (INV-RTY-03).
func TestPermanentStatusesGetOneAttempt(t *testing.T) {
	for _, code := range []grpccodes.Code{grpccodes.InvalidArgument, grpccodes.PermissionDenied, grpccodes.NotFound, grpccodes.Unauthenticated,
		grpccodes.AlreadyExists, grpccodes.FailedPrecondition, grpccodes.Aborted, grpccodes.OutOfRange, grpccodes.Canceled} {
		t.Run(code.String(), func(t *testing.T) {
			h := &health{answer: always(code)}
			ic, _, _ := guarded(grpcPolicy())
			err := check(dial(t, serve(t, h), ic.DialOptions()...))
			if h.calls() != 1 {
				t.Errorf("the server received %d calls, want 1", h.calls())
			}
			if st, ok := status.FromError(err); !ok || st.Code() != code || st.Message() != "injected" {
				t.Errorf("err = %v, want the server's own %s status", err, code)
			}
			var re *retry.Error
			if errors.As(err, &re) {
				t.Errorf("err is a *retry.Error (%v); want the server's status itself", re)
			}
		})
	}
}

// The codes no policy can list for retry end after one attempt too, with a
// *retry.Error that says so: UNKNOWN and INTERNAL map to 500, which this
// policy does not list, UNIMPLEMENTED to 501.
func TestUnrecognizedStatusesGetOneAttempt(t *testing.T) {
	for _, code := range []grpccodes.Code{grpccodes.Unknown, grpccodes.Internal, grpccodes.Unimplemented} {
		t.Run(code.String(), func(t *testing.T) {
			h := &health{answer: always(code)}
			ic, _, _ := guarded(grpcPolicy())
			err := check(dial(t, serve(t, h), ic.DialOptions()...))
			re := retryError(t, err)
			if re.Code != codes.PermanentFailure || re.State != retry.TerminalExhausted || re.Last.Class != retry.Unrecognized || h.calls() != 1 {
				t.Errorf("got %s %s class %s after %d calls, want ERR_PERMANENT_FAILURE TERMINAL_EXHAUSTED unrecognized after 1",
					re.Code, re.State, re.Last.Class, h.calls())
			}
			if status.Code(err) != code {
				t.Errorf("status.Code(err) = %s, want %s", status.Code(err), code)
			}
		})
	}
}

// DATA_LOSS after the call left says the server lost or corrupted data: it
// cannot say whether this call's write survived, so the outcome is unknown
// and goes to reconciliation (RG-LOAD: "an uncertain local outcome must
// trigger reconciliation, not an invented failure"), never retried.
func TestDataLossIsAnUnknownOutcome(t *testing.T) {
	h := &health{answer: always(grpccodes.DataLoss)}
	ic, _, _ := guarded(grpcPolicy())
	err := check(dial(t, serve(t, h), ic.DialOptions()...))
	re := retryError(t, err)
	if re.Code != codes.UnknownOutcome || re.State != retry.UnknownOutcome || h.calls() != 1 {
		t.Errorf("got %s %s after %d calls, want ERR_UNKNOWN_OUTCOME UNKNOWN_OUTCOME after 1", re.Code, re.State, h.calls())
	}
	if status.Code(err) != grpccodes.DataLoss {
		t.Errorf("status.Code(err) = %s, want DataLoss", status.Code(err))
	}
}

// RESOURCE_EXHAUSTED is a 429 whose grpc-retry-pushback-ms is the server's
// delay: the retry waits max(backoff, pushback) (MC-PO-01), a pushback beyond
// retryAfter.maxDelay fails fast, and one that is not a non-negative integer
// means "do not retry" (gRPC A6), terminal as an unparseable Retry-After.
func TestPushbackIsTheServersDelay(t *testing.T) {
	pushback := func(v ...string) func(ctx context.Context, n int) error {
		return func(ctx context.Context, n int) error {
			if n > 1 {
				return nil
			}
			md := metadata.MD{}
			for _, s := range v {
				md.Append("grpc-retry-pushback-ms", s)
			}
			_ = grpc.SetTrailer(ctx, md)
			return status.Error(grpccodes.ResourceExhausted, "slow down")
		}
	}
	t.Run("honoured", func(t *testing.T) {
		h := &health{answer: pushback("1500")}
		ic, _, clk := guarded(grpcPolicy())
		if err := check(dial(t, serve(t, h), ic.DialOptions()...)); err != nil {
			t.Fatal(err)
		}
		if w := clk.all(); !slices.Equal(w, []time.Duration{1500 * time.Millisecond}) || h.calls() != 2 {
			t.Errorf("waited %v over %d calls, want [1.5s] (the pushback, above a full-jitter draw of at most 200ms) then a second call", w, h.calls())
		}
	})
	for _, tc := range []struct {
		name   string
		values []string
		code   codes.Code
	}{
		{"beyond retryAfter.maxDelay", []string{"3001"}, codes.RetryAfterTooLong},
		{"negative", []string{"-1"}, codes.PermanentFailure},
		{"not a number", []string{"soon"}, codes.PermanentFailure},
		{"two values", []string{"10", "20"}, codes.PermanentFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &health{answer: pushback(tc.values...)}
			ic, _, clk := guarded(grpcPolicy())
			re := retryError(t, check(dial(t, serve(t, h), ic.DialOptions()...)))
			if re.Code != tc.code || re.State != retry.TerminalExhausted || h.calls() != 1 || len(clk.all()) != 0 {
				t.Errorf("got %s %s after %d calls and waits %v, want %s TERMINAL_EXHAUSTED after 1 call, no wait", re.Code, re.State, h.calls(), clk.all(), tc.code)
			}
		})
	}
}

// A DEADLINE_EXCEEDED after the call left may have been applied: without a
// key it is not replayed and ends UNKNOWN_OUTCOME (RG-LOAD: reconcile, do
// not invent a failure). The server sees the attempt's deadline as grpc-timeout.
func TestDeadlineExceededWithoutAKeyIsAnUnknownOutcome(t *testing.T) {
	h := &health{answer: func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() }}
	ic, _, _ := guarded(grpcPolicy(keyless, func(p *policyconfig.Policy) { p.PerAttemptTimeout = policyconfig.Duration(150 * time.Millisecond) }))
	err := check(dial(t, serve(t, h), ic.DialOptions()...))
	re := retryError(t, err)
	if re.Code != codes.UnknownOutcome || re.State != retry.UnknownOutcome || re.Attempts != 1 {
		t.Fatalf("got %s %s after %d attempts, want ERR_UNKNOWN_OUTCOME UNKNOWN_OUTCOME after 1: %v", re.Code, re.State, re.Attempts, err)
	}
	if re.Last.Transport != limits.Timeout || !re.Last.Dispatched || re.Last.Class != retry.Ambiguous {
		t.Errorf("last evidence %+v, want a dispatched, ambiguous Timeout", re.Last)
	}
	if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != grpccodes.DeadlineExceeded {
		t.Errorf("err %v: want it to match context.DeadlineExceeded and carry DEADLINE_EXCEEDED", err)
	}
	if _, deadlines := h.seen(); len(deadlines) != 1 || deadlines[0] <= 0 || deadlines[0] > 150*time.Millisecond {
		t.Errorf("the server saw deadlines %v, want one within the 150ms perAttemptTimeout", deadlines)
	}
}

// Each attempt carries what is left of the operation's deadline, never more.
func TestEachAttemptCarriesTheRemainingDeadline(t *testing.T) {
	h := &health{answer: always(grpccodes.Unavailable)}
	ic, _, _ := guarded(grpcPolicy())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = dial(t, serve(t, h), ic.DialOptions()...).Check(ctx, nil, retrygrpc.WithVars(smsVars))
	_, deadlines := h.seen()
	if len(deadlines) == 0 {
		t.Fatal("no call reached the server")
	}
	for i, d := range deadlines {
		if d <= 0 || d > 2*time.Second {
			t.Errorf("call %d had %v left, want within the caller's 2s", i+1, d)
		}
	}
}

// A keyless call that may have been applied is never sent again, even under
// a policy whose operation is labelled with an idempotent HTTP method: on the
// wire every gRPC call is a POST.
func TestAKeylessCallIsNotReplayedWhateverTheOperationSays(t *testing.T) {
	h := &health{answer: func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() }}
	ic, _, _ := guarded(grpcPolicy(keyless, func(p *policyconfig.Policy) {
		p.Operation = "GET /v1/status"
		p.PerAttemptTimeout = policyconfig.Duration(100 * time.Millisecond)
	}))
	err := check(dial(t, serve(t, h), ic.DialOptions()...))
	if h.calls() != 1 {
		t.Errorf("the server received %d calls, want 1", h.calls())
	}
	if !errors.Is(err, retry.ErrNotCompleted) || !errors.Is(err, retrygrpc.ErrNotReplaySafe) {
		t.Errorf("err = %v, want an operation that did not complete, matching ErrNotReplaySafe", err)
	}
}

// A channel that never connects sent nothing: every attempt is proven not
// dispatched (ConnectionRefused), so retrying it duplicates nothing.
func TestAChannelThatNeverConnectsIsNotDispatched(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens: every dial is refused
	ic, _, _ := guarded(grpcPolicy())
	re := retryError(t, check(dial(t, addr, ic.DialOptions()...)))
	if re.Code != codes.RetryLimitExceeded || re.Attempts != 3 {
		t.Errorf("got %s after %d attempts, want ERR_RETRY_LIMIT_EXCEEDED after 3", re.Code, re.Attempts)
	}
	if re.Last.Transport != limits.ConnectionRefused || re.Last.Dispatched || re.Last.Class != retry.Transient {
		t.Errorf("last evidence %+v, want ConnectionRefused, not dispatched, transient", re.Last)
	}
}

// A call that waits for a connection (grpc.WaitForReady) and times out
// before one is made is a Timeout that sent nothing: transient, not
// ambiguous.
func TestATimeoutBeforeAnyConnectionIsNotDispatched(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	ic, _, _ := guarded(grpcPolicy(func(p *policyconfig.Policy) { p.PerAttemptTimeout = policyconfig.Duration(50 * time.Millisecond) }))
	re := retryError(t, check(dial(t, addr, ic.DialOptions()...), grpc.WaitForReady(true)))
	if re.Attempts != 3 || re.Last.Transport != limits.Timeout || re.Last.Dispatched || re.Last.Class != retry.Transient {
		t.Errorf("%d attempts, last evidence %+v; want 3, the last a Timeout, not dispatched, transient", re.Attempts, re.Last)
	}
}

// dropping is a listener whose connections the test can cut from inside a
// handler: after the server has read (and applied) the call.
type dropping struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *dropping) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *dropping) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

// A connection that drops after the server read the call gives an
// UNAVAILABLE that grpc-go makes up: a ConnectionReset that may have been
// applied, never the server's 503. Without a key it ends UNKNOWN_OUTCOME.
func TestAConnectionDroppedAfterTheCallIsAmbiguous(t *testing.T) {
	base, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &dropping{Listener: base}
	h := &health{answer: func(context.Context, int) error { lis.drop(); time.Sleep(50 * time.Millisecond); return nil }}
	ic, _, _ := guarded(grpcPolicy(keyless))
	err = check(dial(t, serveOn(t, lis, h), ic.DialOptions()...))
	re := retryError(t, err)
	if re.State != retry.UnknownOutcome || re.Last.Transport != limits.ConnectionReset || !re.Last.Dispatched || h.calls() != 1 {
		t.Errorf("got %s, evidence %+v after %d calls; want UNKNOWN_OUTCOME after a dispatched ConnectionReset, 1 call: %v", re.State, re.Last, h.calls(), err)
	}
	if status.Code(err) != grpccodes.Unavailable {
		t.Errorf("status.Code(err) = %s, want grpc-go's Unavailable", status.Code(err))
	}
}

// A policy header that cannot be gRPC metadata sends nothing rather than a
// call without its key.
func TestAHeaderThatCannotBeMetadataSendsNothing(t *testing.T) {
	for _, header := range []string{"Grpc-Idempotency-Key", "Idempotency-Key-Bin", "Idempotency!Key", "User-Agent"} {
		t.Run(header, func(t *testing.T) {
			h := &health{}
			ic, _, _ := guarded(grpcPolicy(func(p *policyconfig.Policy) { p.IdempotencyHeader = header }))
			err := check(dial(t, serve(t, h), ic.DialOptions()...))
			if h.calls() != 0 || err == nil || !strings.Contains(err.Error(), "idempotencyHeader") {
				t.Errorf("%d calls, err %v; want none, and an error naming idempotencyHeader", h.calls(), err)
			}
		})
	}
}

// grpc-go's own retries are a hidden layer. DialOptions disables them: under
// a service config that retries UNAVAILABLE four times, the server still
// receives the policy's three attempts, not 3 × 4 = 12.
func TestDialOptionsDisableTheServiceConfigsRetries(t *testing.T) {
	h := &health{answer: always(grpccodes.Unavailable)}
	ic, _, _ := guarded(grpcPolicy())
	err := check(dial(t, serve(t, h), append(ic.DialOptions(), grpc.WithDefaultServiceConfig(retryingServiceConfig))...))
	if re := retryError(t, err); re.Attempts != 3 || h.calls() != 3 {
		t.Errorf("%d attempts, %d calls at the server; want 3 and 3", re.Attempts, h.calls())
	}
}

// On a channel built without DialOptions, grpc-go's retries are caught: the
// stats handler counts them, they ask the budget, and the executor adds no
// attempt of its own.
func TestAServiceConfigThatRetriesIsCaught(t *testing.T) {
	hidden := func(ic *retrygrpc.Interceptor) []grpc.DialOption {
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(ic.Unary), grpc.WithStatsHandler(ic), grpc.WithDefaultServiceConfig(retryingServiceConfig)}
	}
	t.Run("a failure", func(t *testing.T) {
		h := &health{answer: always(grpccodes.Unavailable)}
		ic, _, _ := guarded(grpcPolicy())
		err := check(dial(t, serve(t, h), hidden(ic)...))
		if !errors.Is(err, retrygrpc.ErrHiddenRetries) || h.calls() != 4 {
			t.Errorf("%d calls at the server, err %v; want grpc-go's 4 and no more, matching ErrHiddenRetries", h.calls(), err)
		}
	})
	t.Run("a success", func(t *testing.T) {
		h := &health{answer: func(_ context.Context, n int) error {
			if n < 3 {
				return status.Error(grpccodes.Unavailable, "injected")
			}
			return nil
		}}
		ic, ex, _ := guarded(grpcPolicy())
		b, _ := ex.Budget("sms-2fa-dispatch")
		before := b.Tokens()
		if err := check(dial(t, serve(t, h), hidden(ic)...)); err != nil {
			t.Fatal(err)
		}
		// Two hidden retries drew a token each; the primary success deposits 0.1.
		if got, want := b.Tokens(), before-2+0.1; h.calls() != 3 || got < want-0.001 || got > want+0.001 {
			t.Errorf("%d calls, tokens %.3f -> %.3f; want 3 calls and %.3f", h.calls(), before, got, want)
		}
	})
	t.Run("without the stats handler", func(t *testing.T) {
		h := &health{answer: always(grpccodes.Unavailable)}
		ic, ex, clk := guarded(grpcPolicy())
		b, _ := ex.Budget("sms-2fa-dispatch")
		before := b.Tokens()
		err := check(dial(t, serve(t, h), grpc.WithChainUnaryInterceptor(ic.Unary), grpc.WithDefaultServiceConfig(retryingServiceConfig)))
		if !errors.Is(err, retrygrpc.ErrWithoutDialOptions) || h.calls() != 4 || len(clk.all()) != 0 {
			t.Errorf("%d calls at the server, waits %v, err %v; want grpc-go's 4 and no more, no wait, matching ErrWithoutDialOptions", h.calls(), clk.all(), err)
		}
		if got := b.Tokens(); got != before {
			t.Errorf("tokens %.3f -> %.3f: the budget was asked for retries nothing counted", before, got)
		}
	})
}

// One Interceptor serves concurrent calls on one channel: each call's
// attempts carry its own key and are counted apart (run with -race).
func TestConcurrentCallsKeepTheirOwnKeys(t *testing.T) {
	var mu sync.Mutex
	failed := map[string]bool{} // each key's first attempt fails
	h := &health{answer: func(ctx context.Context, _ int) error {
		md, _ := metadata.FromIncomingContext(ctx)
		key := strings.Join(md.Get("idempotency-key"), ",")
		mu.Lock()
		defer mu.Unlock()
		if !failed[key] {
			failed[key] = true
			return status.Error(grpccodes.Unavailable, "injected")
		}
		return nil
	}}
	p := grpcPolicy()
	p.Budget.MaxTokens = 100 // every call's one retry fits the start credit
	ic, _, _ := guarded(p)
	client := dial(t, serve(t, h), ic.DialOptions()...)
	const callers = 16
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for n := range callers {
		wg.Go(func() {
			vars := retry.Vars{"user_id": strconv.Itoa(n), "login_session_id": "s"}
			_, errs[n] = client.Check(context.Background(), nil, retrygrpc.WithVars(vars))
		})
	}
	wg.Wait()
	for n, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", n, err)
		}
	}
	keys, _ := h.seen()
	count := map[string]int{}
	for _, k := range keys {
		if len(k) != 1 {
			t.Fatalf("a call carried idempotency-key %q, want exactly one value", k)
		}
		count[k[0]]++
	}
	for n := range callers {
		if key := "SMS-2FA-" + strconv.Itoa(n) + "-s"; count[key] != 2 {
			t.Errorf("key %s reached the server %d times, want 2 (the failure and its retry)", key, count[key])
		}
	}
}
