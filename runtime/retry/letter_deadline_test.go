package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// hangingLetters is a dead-letter sink that cannot store anything: Write
// waits for its context to end, as a sink whose broker is gone does.
type hangingLetters struct{ deadline chan time.Time }

func (h *hangingLetters) Write(ctx context.Context, _ retry.DeadLetter) error {
	d, _ := ctx.Deadline()
	h.deadline <- d
	<-ctx.Done()
	return ctx.Err()
}

// A sink that hangs holds the caller no longer than the caller's own
// deadline (docs/deadletter-journal.md): the dead letter's context ends with
// the sooner of the caller's deadline and the policy's, and only a
// cancellation is stripped. On the old letterContext, which stripped the
// caller's context before reading its deadline, the sink's context ended
// with the policy's 4 s deadline.
func TestAHangingSinkEndsWithTheCallersDeadline(t *testing.T) {
	p := fixtures.SMS() // a 4 s policy deadline
	sink := &hangingLetters{deadline: make(chan time.Time, 1)}
	ex := retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{}), retry.WithDeadLetters(sink))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	callerDeadline, _ := ctx.Deadline()
	vars := retry.Vars{"user_id": "1", "login_session_id": "s"}
	err := ex.Do(ctx, p.Policy.Name, vars, func(context.Context, retry.Attempt) error { return retry.Status(400, "") })
	got := <-sink.deadline
	if got.IsZero() || got.After(callerDeadline) {
		t.Fatalf("the dead letter's context ends %v after the caller's deadline", got.Sub(callerDeadline))
	}
	var re *retry.Error
	if !errors.As(err, &re) || re.State != retry.TerminalExhausted || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v", err)
	}
}

// A caller's cancellation does not end the dead letter's context, but the
// caller's deadline still bounds it.
func TestACancelledCallerStillOwesItsLetterUntilItsDeadline(t *testing.T) {
	p := fixtures.SMS()
	sink := &deadlineLetters{}
	ex := retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{}), retry.WithDeadLetters(sink))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	callerDeadline, _ := ctx.Deadline()
	vars := retry.Vars{"user_id": "1", "login_session_id": "s"}
	_ = ex.Do(ctx, p.Policy.Name, vars, func(context.Context, retry.Attempt) error {
		cancel()
		return retry.Status(400, "")
	})
	if sink.err != nil || sink.deadline.IsZero() || sink.deadline.After(callerDeadline) {
		t.Fatalf("the sink's context: err %v, deadline %v after the caller's", sink.err, sink.deadline.Sub(callerDeadline))
	}
}

type deadlineLetters struct {
	deadline time.Time
	err      error
}

func (d *deadlineLetters) Write(ctx context.Context, _ retry.DeadLetter) error {
	d.deadline, _ = ctx.Deadline()
	d.err = ctx.Err()
	return nil
}
