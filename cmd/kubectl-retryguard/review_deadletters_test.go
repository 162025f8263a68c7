package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// Issue 20, item 6, and seed 003: "an uncertain local outcome must trigger
// reconciliation". The idempotency key is stable across every attempt and
// every later try of the same operation (seed 000, INV-RTY-05), so the same
// operation can end in UNKNOWN_OUTCOME again after an operator reconciled its
// first letter. The mark, keyed by identity alone, hides the new letter:
// list never shows it, though it was written after the reconciliation.
func TestReviewReconcileDoesNotHideALaterLetter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead-letters.journal")
	first := retry.DeadLetter{Operation: 1, Namespace: "auth", Policy: "sms-2fa-dispatch", Key: "SMS-2FA-42-s1",
		State: retry.UnknownOutcome, Code: "ERR_UNKNOWN_OUTCOME", At: time.Now().Add(-time.Hour)}
	write := func(l retry.DeadLetter) {
		j, err := deadletter.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Write(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write(first)
	id := deadletter.Identity(first)
	runOK(t, "deadletters", "reconcile", "-f", path, "--note", "provider shows the first one delivered", id)

	time.Sleep(10 * time.Millisecond)
	later := first
	later.Operation, later.At = 7, time.Now() // a new operation, after the reconciliation
	write(later)
	out := runOK(t, "deadletters", "list", "-f", path, "--state", "UNKNOWN_OUTCOME")
	if lines(out) != 1 {
		t.Fatalf("an UNKNOWN_OUTCOME letter written after the reconciliation is hidden by it; list shows %d letters:\n%s",
			lines(out), strings.TrimSpace(out))
	}
}
