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

// Issue 20, item 6, and RG-LOAD: "an uncertain local outcome must trigger
// reconciliation". The idempotency key is stable across every attempt and
// every later try of the same operation (RETRY-SMS-001, INV-RTY-05), so the same
// operation can end in UNKNOWN_OUTCOME again after an operator reconciled its
// first letter. A reconciliation names its letter precisely (letterID), so
// it never hides the new letter, written after it.
func TestReconcileDoesNotHideALaterLetter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead-letters.journal")
	first := retry.DeadLetter{OperationID: 1, Namespace: "auth", Policy: "sms-2fa-dispatch", Key: "SMS-2FA-42-s1",
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
	later.OperationID, later.At = 7, time.Now() // a new operation, after the reconciliation
	write(later)
	out := runOK(t, "deadletters", "list", "-f", path, "--state", "UNKNOWN_OUTCOME")
	if lines(out) != 1 {
		t.Fatalf("an UNKNOWN_OUTCOME letter written after the reconciliation is hidden by it; list shows %d letters:\n%s",
			lines(out), strings.TrimSpace(out))
	}
}

// The same on the forwarder's topic (kfake): the reconciliation record does
// not hide a letter of the same operation produced after it, and a second
// letter of the same identity stays distinct from the first, while a
// duplicate delivery of one letter shows once.
func TestTopicReconcileDoesNotHideALaterLetter(t *testing.T) {
	brokers, topic, produce := deadLetterTopic(t)
	first := retry.DeadLetter{OperationID: 1, Namespace: "auth", Policy: "sms-2fa-dispatch", Key: "SMS-2FA-42-s1",
		State: retry.UnknownOutcome, Code: "ERR_UNKNOWN_OUTCOME", At: time.Now().Add(-time.Hour)}
	produce(first)
	runOK(t, "deadletters", "reconcile", "--brokers", brokers, "--topic", topic, "--note", "delivered", deadletter.Identity(first))
	later := first
	later.OperationID, later.At = 7, time.Now()
	produce(later)
	out := runOK(t, "deadletters", "list", "--brokers", brokers, "--topic", topic, "--state", "UNKNOWN_OUTCOME")
	if lines(out) != 1 {
		t.Fatalf("an UNKNOWN_OUTCOME letter produced after the reconciliation is hidden by it; list shows %d letters:\n%s",
			lines(out), strings.TrimSpace(out))
	}
	produce(later) // at least once: delivered again
	if out := runOK(t, "deadletters", "list", "--brokers", brokers, "--topic", topic, "--all"); lines(out) != 2 ||
		!strings.Contains(out, letterID(first)) || !strings.Contains(out, letterID(later)) {
		t.Fatalf("two letters of one operation, the second delivered twice: list --all shows %d:\n%s", lines(out), strings.TrimSpace(out))
	}
}
