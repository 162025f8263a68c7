package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	// started is when the test binary started: its -timeout counts from here.
	started = time.Now()
	// interrupted is done once the test binary receives SIGINT or SIGTERM.
	// The go commands the tests start are in process groups of their own
	// (goCommand), out of reach of a terminal's SIGINT: this is how they hear it.
	interrupted context.Context = context.Background()
)

func TestMain(m *testing.M) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	interrupted = ctx
	code := m.Run()
	stop()
	os.Exit(code)
}

// commandContext is the context a test's child commands run under: done when
// the test ends, when the binary is interrupted, and a margin before the
// binary's -timeout, whose panic would exit at once and leave the commands
// running. The margin (a tenth of the timeout, at most a minute) leaves the
// test time to fail and clean up first.
func commandContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	stop := context.AfterFunc(interrupted, cancel)
	t.Cleanup(func() { stop(); cancel() })
	if d, ok := t.Deadline(); ok {
		margin := min(time.Minute, d.Sub(started)/10)
		var cancelAt context.CancelFunc
		ctx, cancelAt = context.WithDeadline(ctx, d.Add(-margin))
		t.Cleanup(cancelAt)
	}
	return ctx
}

// goCmd runs the go command with args in dir, in its own process group, and
// fails the test on an error, saying when the command was killed and why.
func goCmd(t *testing.T, env []string, dir string, args ...string) string {
	t.Helper()
	ctx := commandContext(t)
	out, err := goCommand(ctx, dir, env, args...).CombinedOutput()
	if err != nil {
		why := ""
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			why = " (killed, with every process it started, before the test binary's -timeout ran out)"
		case interrupted.Err() != nil:
			why = " (killed, with every process it started: the test binary was interrupted)"
		}
		t.Fatalf("go %s (in %s): %v%s\n%s", strings.Join(args, " "), dir, err, why, out)
	}
	return string(out)
}
