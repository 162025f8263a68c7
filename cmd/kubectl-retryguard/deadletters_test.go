package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// someLetters are three UNKNOWN_OUTCOME letters of sms-2fa-dispatch an hour
// apart, and one TERMINAL_EXHAUSTED letter of another policy.
func someLetters(now time.Time) []retry.DeadLetter {
	var out []retry.DeadLetter
	for i := range 3 {
		out = append(out, retry.DeadLetter{OperationID: uint64(i + 1), Namespace: "auth", Policy: "sms-2fa-dispatch",
			Key: fmt.Sprintf("SMS-2FA-%d-s", i), State: retry.UnknownOutcome, Code: "ERR_UNKNOWN_OUTCOME",
			At: now.Add(-time.Duration(3-i) * time.Hour)})
	}
	return append(out, retry.DeadLetter{OperationID: 9, Namespace: "pay", Policy: "charge", Key: "PAY-9",
		State: retry.TerminalExhausted, Code: "ERR_RETRY_LIMIT_EXCEEDED", At: now.Add(-time.Hour)})
}

func journalOf(t *testing.T, letters []retry.DeadLetter) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dead-letters.journal")
	j, err := deadletter.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range letters {
		if err := j.Write(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// lines counts the letters a list printed (its lines after the header).
func lines(out string) int { return strings.Count(out, "\n") - 1 }

// An operator lists a journal's UNKNOWN_OUTCOME letters (here while the app
// still holds the journal open), filters by policy and time, exports JSON
// lines, and marks one reconciled: list then leaves it out, --all shows it
// with its note, and the mark survives in the ledger beside the journal.
func TestDeadlettersOfAJournal(t *testing.T) {
	now := time.Now()
	letters := someLetters(now)
	path := journalOf(t, letters)
	out := runOK(t, "deadletters", "list", "-f", path, "--state", "UNKNOWN_OUTCOME")
	if lines(out) != 3 || !strings.Contains(out, "auth/sms-2fa-dispatch/SMS-2FA-0-s") || strings.Contains(out, "PAY-9") {
		t.Fatalf("list --state UNKNOWN_OUTCOME:\n%s", out)
	}
	if out := runOK(t, "deadletters", "list", "-f", path, "--policy", "charge"); lines(out) != 1 || !strings.Contains(out, "TERMINAL_EXHAUSTED") {
		t.Fatalf("list --policy charge:\n%s", out)
	}
	if out := runOK(t, "deadletters", "list", "-f", path, "--since", "150m", "--until", now.Format(time.RFC3339)); lines(out) != 3 {
		t.Fatalf("list --since 150m (two sms letters and the charge):\n%s", out)
	}
	var exported []entry
	for _, line := range strings.Split(strings.TrimSpace(runOK(t, "deadletters", "export", "-f", path)), "\n") {
		var e entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("export: %v: %s", err, line)
		}
		exported = append(exported, e)
	}
	if len(exported) != 4 || exported[3].Letter.Code != "ERR_RETRY_LIMIT_EXCEEDED" || exported[0].Identity != letterID(letters[0]) {
		t.Fatalf("export: %+v", exported)
	}
	id := deadletter.Identity(letters[1])
	if out := runOK(t, "deadletters", "reconcile", "-f", path, "--note", "the provider shows it delivered", id); !strings.Contains(out, "reconciled "+id) {
		t.Fatalf("reconcile: %s", out)
	}
	if out := runOK(t, "deadletters", "list", "-f", path, "--state", "UNKNOWN_OUTCOME"); lines(out) != 2 || strings.Contains(out, id) {
		t.Fatalf("list after reconciling %s:\n%s", id, out)
	}
	if out := runOK(t, "deadletters", "list", "-f", path, "--all"); lines(out) != 4 || !strings.Contains(out, "the provider shows it delivered") {
		t.Fatalf("list --all:\n%s", out)
	}
}

// list -o json|yaml is one DeadLetterList of the letters the filters keep,
// and reconcile -o json the letters it marked, with their reconciliation.
func TestDeadlettersMachineReadable(t *testing.T) {
	letters := someLetters(time.Now())
	path := journalOf(t, letters)
	res := decodeStrict[output.DeadLetterList](t, runOK(t, "deadletters", "list", "-f", path, "--state", "UNKNOWN_OUTCOME", "-o", "json"))
	if res.Kind != output.KindDeadLetterList || res.APIVersion != output.APIVersion || len(res.Letters) != 3 ||
		res.Letters[0].Identity != letterID(letters[0]) || res.Letters[0].Letter.Key != "SMS-2FA-0-s" || res.Letters[0].Reconciled != nil {
		t.Fatalf("list -o json: %+v", res)
	}
	id := deadletter.Identity(letters[2])
	marked := decodeStrict[output.DeadLetterList](t, runOK(t, "deadletters", "reconcile", "-f", path, "--note", "delivered", "--by", "jane", "-o", "json", id))
	if len(marked.Letters) != 1 || marked.Letters[0].Identity != letterID(letters[2]) || marked.Letters[0].Reconciled == nil ||
		marked.Letters[0].Reconciled.Note != "delivered" || marked.Letters[0].Reconciled.By != "jane" {
		t.Fatalf("reconcile -o json: %+v", marked)
	}
	var all output.DeadLetterList
	if err := yaml.UnmarshalStrict([]byte(runOK(t, "deadletters", "list", "-f", path, "--all", "-o", "yaml")), &all); err != nil || len(all.Letters) != 4 ||
		all.Letters[2].Reconciled == nil || all.Letters[2].Reconciled.Identity != letterID(letters[2]) {
		t.Fatalf("list --all -o yaml: %v, %+v", err, all)
	}
	if res := decodeStrict[output.DeadLetterList](t, runOK(t, "deadletters", "list", "-f", path, "--policy", "nobody", "-o", "json")); res.Letters == nil {
		t.Error("an empty list is null, not []")
	}
}

// Bad input gets a clear error naming the flag, and exit 2; a letter that
// is not there is refused, and nothing is marked.
func TestDeadlettersRefusesBadInput(t *testing.T) {
	path := journalOf(t, someLetters(time.Now()))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"list", "-f", path, "--state", "DISPATCHED"}, exitUsage, `--state "DISPATCHED"`},
		{[]string{"list", "-f", path, "--since", "yesterday"}, exitUsage, `--since "yesterday"`},
		{[]string{"list"}, exitUsage, "give a journal file with -f"},
		{[]string{"list", "-f", path, "--brokers", "k:9092"}, exitUsage, "one or the other"},
		{[]string{"reconcile", "-f", path, "auth/x/y"}, exitUsage, "--note"},
		{[]string{"reconcile", "-f", path, "--note", "n", "auth/x/y"}, exitUnreadable, `no dead letter "auth/x/y"`},
		{[]string{"list", "-f", filepath.Join(t.TempDir(), "none")}, exitUnreadable, "no such file"},
		{[]string{"purge"}, exitUsage, `unknown command "purge"`},
		// Flags are cobra's, as in every other command: a long flag takes two dashes.
		{[]string{"list", "-brokers", "k:9092", "-topic", "t"}, exitUsage, "unknown shorthand flag"},
		{[]string{"list", "-f", path, "-o", "dot"}, exitUsage, `--output must be one of text, json, yaml, not "dot"`},
	} {
		code, _, errOut := runCLI(t, "", append([]string{"deadletters"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if out := runOK(t, "deadletters", "list", "-f", path); lines(out) != 4 {
		t.Fatalf("a refused reconcile marked something:\n%s", out)
	}
}

// deadLetterTopic starts a kfake cluster holding the forwarder's topic, and
// returns its brokers (as --brokers takes them), the topic, and a function
// that produces letters to it as the forwarder does: keyed by identity.
func deadLetterTopic(t *testing.T) (brokers, topic string, produce func(...retry.DeadLetter)) {
	t.Helper()
	topic = "retryguard.deadletters"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	produce = func(letters ...retry.DeadLetter) {
		t.Helper()
		var records []*kgo.Record
		for _, l := range letters {
			value, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			records = append(records, &kgo.Record{Topic: topic, Key: []byte(deadletter.Identity(l)), Value: value})
		}
		if err := client.ProduceSync(context.Background(), records...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return strings.Join(c.ListenAddrs(), ","), topic, produce
}

// The forwarder's topic (here kfake), with a duplicate from at-least-once
// delivery: list shows each letter once, and a reconciliation is a record
// under the letter's key that every later list sees.
func TestDeadlettersOfATopic(t *testing.T) {
	brokers, topic, produce := deadLetterTopic(t)
	letters := someLetters(time.Now())
	produce(append(letters, letters[0])...) // the first letter twice
	if out := runOK(t, "deadletters", "list", "--brokers", brokers, "--topic", topic); lines(out) != 4 {
		t.Fatalf("list of the topic:\n%s", out)
	}
	id := deadletter.Identity(letters[0])
	runOK(t, "deadletters", "reconcile", "--brokers", brokers, "--topic", topic, "--note", "refunded", id)
	out := runOK(t, "deadletters", "list", "--brokers", brokers, "--topic", topic, "--state", "UNKNOWN_OUTCOME")
	if lines(out) != 2 || strings.Contains(out, id) {
		t.Fatalf("list after reconciling %s on the topic:\n%s", id, out)
	}
}
