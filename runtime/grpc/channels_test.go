package retrygrpc_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/contract/codes"
	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	"github.com/retryguard/retryguard/runtime/retry"
)

// One Interceptor on two channels under a service config that retries
// UNAVAILABLE four times (issue 28, item 4): the channel built with
// DialOptions gets the policy's three attempts and no more, whatever the
// other channel did first; the channel built with the interceptor alone,
// whose attempts nothing can count, gets one attempt and says why in its
// error. Nothing is counted that the executor did not do: attempts, backoffs,
// budget tokens and dead letters are the DialOptions channel's three
// attempts and the other's one.
func TestOneInterceptorJudgesEachChannelByItsOwnCalls(t *testing.T) {
	ic, b, clk, reg, dead := observed(grpcPolicy())
	tokens := b.Tokens()
	built, alone := &health{answer: always(grpccodes.Unavailable)}, &health{answer: always(grpccodes.Unavailable)}
	withDialOptions := dial(t, serve(t, built), append(ic.DialOptions(), grpc.WithDefaultServiceConfig(retryingServiceConfig))...)
	withUnaryAlone := dial(t, serve(t, alone), grpc.WithUnaryInterceptor(ic.Unary), grpc.WithDefaultServiceConfig(retryingServiceConfig))

	for round := range 2 { // the second round follows calls the stats handler saw on the first channel
		errBuilt, errAlone := check(withDialOptions), check(withUnaryAlone)
		if re := retryError(t, errBuilt); re.Attempts != 3 || built.calls() != 3*(round+1) || errors.Is(errBuilt, retrygrpc.ErrWithoutDialOptions) {
			t.Errorf("round %d, DialOptions channel: %d attempts, %d calls at the server; want 3 attempts a call, 3 calls a call: %v",
				round, re.Attempts, built.calls(), errBuilt)
		}
		re := retryError(t, errAlone)
		if re.Attempts != 1 || alone.calls() != 4*(round+1) || !errors.Is(errAlone, retrygrpc.ErrWithoutDialOptions) {
			t.Errorf("round %d, Unary alone: %d attempts, %d calls at the server; want 1 attempt (grpc-go's own 4 calls) matching ErrWithoutDialOptions: %v",
				round, re.Attempts, alone.calls(), errAlone)
		}
		if re.Code != codes.RetryLimitExceeded || status.Code(errAlone) != grpccodes.Unavailable {
			t.Errorf("round %d, Unary alone: %s, status %s; want ERR_RETRY_LIMIT_EXCEEDED and the server's Unavailable", round, re.Code, status.Code(errAlone))
		}
	}
	if n := counted(t, reg, "retryguard_attempts_total"); n != 2*(3+1) {
		t.Errorf("retryguard_attempts_total %d, want 8: two rounds of 3 + 1", n)
	}
	if n, w := counted(t, reg, "retryguard_backoff_seconds"), len(clk.all()); n != 4 || w != 4 {
		t.Errorf("%d backoffs counted, %d waited; want 4: two a round, the DialOptions channel's", n, w)
	}
	if got := b.Tokens(); math.Abs(tokens-4-got) > 0.001 {
		t.Errorf("tokens %.3f -> %.3f, want 4 fewer: two retries a round, the DialOptions channel's", tokens, got)
	}
	letters := dead.written()
	attempts := 0
	for _, l := range letters {
		attempts += len(l.Attempts)
	}
	if len(letters) != 4 || attempts != 8 {
		t.Errorf("%d dead letters holding %d attempts, want 4 holding 8", len(letters), attempts)
	}
}

// Hidden retries caught on a channel with the stats handler but without
// grpc.WithDisableRetry add nothing that did not happen (issue 28, item 4):
// the server receives grpc-go's four calls, the executor makes one attempt,
// counts one, waits no backoff, writes one attempt to the dead letter, and
// the budget pays for the three retries grpc-go sent, nothing more; the
// caller sees the server's UNAVAILABLE.
func TestCaughtHiddenRetriesAddNoAttempt(t *testing.T) {
	ic, b, clk, reg, dead := observed(grpcPolicy())
	tokens := b.Tokens()
	h := &health{answer: always(grpccodes.Unavailable)}
	err := check(dial(t, serve(t, h), grpc.WithChainUnaryInterceptor(ic.Unary), grpc.WithStatsHandler(ic), grpc.WithDefaultServiceConfig(retryingServiceConfig)))
	re := retryError(t, err)
	if h.calls() != 4 || re.Attempts != 1 || re.Code != codes.RetryLimitExceeded || re.State != retry.TerminalExhausted {
		t.Errorf("%d calls at the server, %s %s after %d attempts; want grpc-go's 4 calls, ERR_RETRY_LIMIT_EXCEEDED TERMINAL_EXHAUSTED after 1: %v",
			h.calls(), re.Code, re.State, re.Attempts, err)
	}
	if !errors.Is(err, retrygrpc.ErrHiddenRetries) || status.Code(err) != grpccodes.Unavailable || re.Last.Status != 503 {
		t.Errorf("err %v (status %s, last %+v); want ErrHiddenRetries with the server's Unavailable, a 503", err, status.Code(err), re.Last)
	}
	if n := counted(t, reg, "retryguard_attempts_total"); n != 1 {
		t.Errorf("retryguard_attempts_total %d, want 1", n)
	}
	if n, w := counted(t, reg, "retryguard_backoff_seconds"), clk.all(); n != 0 || len(w) != 0 {
		t.Errorf("%d backoffs counted, waits %v; want none", n, w)
	}
	if got := b.Tokens(); math.Abs(tokens-3-got) > 0.001 {
		t.Errorf("tokens %.3f -> %.3f, want 3 fewer: grpc-go's three retries", tokens, got)
	}
	if l := dead.written(); len(l) != 1 || len(l[0].Attempts) != 1 {
		t.Errorf("dead letters %+v, want one with one attempt", l)
	}
}

// On a channel built with DialOptions, a call the stats handler did not see
// failed before grpc-go began any attempt (here: metadata grpc-go refuses,
// checked in newClientStream): nothing was sent, and the status is grpc-go's,
// not the server's.
func TestACallRefusedBeforeAnyAttemptSentNothing(t *testing.T) {
	h := &health{}
	ic, _, _ := guarded(grpcPolicy())
	ctx := metadata.AppendToOutgoingContext(context.Background(), "bad key", "v")
	_, err := dial(t, serve(t, h), ic.DialOptions()...).Check(ctx, nil, retrygrpc.WithVars(smsVars))
	re := retryError(t, err)
	if re.Last.Dispatched || re.Last.Status != 0 || re.State != retry.TerminalExhausted || h.calls() != 0 {
		t.Errorf("%s, last evidence %+v, %d calls; want TERMINAL_EXHAUSTED, nothing dispatched, no status, none at the server: %v", re.State, re.Last, h.calls(), err)
	}
	if status.Code(err) != grpccodes.Internal {
		t.Errorf("status.Code(err) = %s, want grpc-go's Internal", status.Code(err))
	}
}
