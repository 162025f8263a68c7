package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// kubectl retryguard deadletters: the operator's side of reconciliation
// (docs/deadletter-journal.md). It reads dead letters from a journal file
// or from the Kafka topic the forwarder ships them to, lists and exports
// them, and marks them reconciled: in a ledger beside a journal file
// (<journal>.reconciled, JSON lines), or on the topic as a record under the
// letter's record key with the reconciledHeader header. A reconciliation
// names one letter precisely (letterID), never a whole operation: the same
// idempotency key can end in a second letter after the first was settled.

const deadlettersUsage = `Usage:
  kubectl retryguard deadletters list      (-f JOURNAL | --brokers HOST:PORT --topic TOPIC) [filters] [--all]
  kubectl retryguard deadletters export    (-f JOURNAL | --brokers HOST:PORT --topic TOPIC) [filters] [--all]
  kubectl retryguard deadletters reconcile (-f JOURNAL | --brokers HOST:PORT --topic TOPIC) --note TEXT IDENTITY...

list shows the letters not yet reconciled (--all: every letter), export
writes them as JSON lines, and reconcile marks the named letters (by the
IDENTITY list shows, or by the operation's identity, namespace/policy/key,
when one letter not yet reconciled has it) reconciled. Filters: --state,
--policy, --since, --until.
`

// reconciledHeader marks a record on the topic as a reconciliation, not a
// letter; its value is a reconciliation as JSON.
const reconciledHeader = "retryguard-reconciled"

// reconciliation is an operator's record that a letter's outcome is known
// and dealt with. Identity is the letter's letterID.
type reconciliation struct {
	Identity string    `json:"identity"`
	At       time.Time `json:"at"`
	By       string    `json:"by,omitempty"`
	Note     string    `json:"note"`

	key string // the letter's record key on the topic
}

// letterID names one dead letter: its operation's identity (the record key,
// deadletter.Identity), and the operation number and time of this letter,
// since one idempotency key can end in more than one letter (a later try of
// the same operation). Duplicates of one letter from at-least-once delivery
// share it.
func letterID(l retry.DeadLetter) string {
	if l.Key == "" {
		return deadletter.Identity(l) // already names the operation number and time
	}
	return fmt.Sprintf("%s#%d@%s", deadletter.Identity(l), l.OperationID, l.At.UTC().Format(time.RFC3339Nano))
}

// entry is one dead letter and its reconciliation, if any.
type entry struct {
	Identity   string           `json:"identity"`
	Letter     retry.DeadLetter `json:"letter"`
	Reconciled *reconciliation  `json:"reconciled,omitempty"`
}

// letterSource is where the letters are read and reconciliations written.
type letterSource interface {
	read(ctx context.Context) ([]entry, error)
	reconcile(ctx context.Context, r []reconciliation) error
}

func newDeadlettersCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "deadletters list|export|reconcile (-f JOURNAL | --brokers HOST:PORT --topic TOPIC)",
		Short: "List, export and reconcile dead letters",
		Long:  deadlettersUsage,
		// It parses its own flags, as it always has: -f names a journal here.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := runDeadletters(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr()); code != exitOK {
				return exitWith(code)
			}
			return nil
		},
	}
}

func runDeadletters(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, deadlettersUsage)
		return exitOK
	}
	if len(args) == 0 || (args[0] != "list" && args[0] != "export" && args[0] != "reconcile") {
		fmt.Fprint(stderr, deadlettersUsage)
		return exitUsage
	}
	sub := args[0]
	fs := newFlagSet(
		"deadletters "+sub,
		"deadletters "+sub+" (-f JOURNAL | --brokers HOST:PORT --topic TOPIC) [flags]",
		`  kubectl cp auth/smsapp-7d9c:/var/lib/retryguard/dead-letters.journal dead-letters.journal
  kubectl retryguard deadletters list -f dead-letters.journal --state UNKNOWN_OUTCOME --since 2h
  kubectl retryguard deadletters export --brokers kafka:9092 --topic retryguard.deadletters --policy sms-2fa-dispatch > letters.jsonl
  kubectl retryguard deadletters reconcile -f dead-letters.journal --note "provider shows it delivered" auth/sms-2fa-dispatch/SMS-2FA-42-s1
`,
		stderr,
	)
	var file, brokers, topic, state, policy, since, until, note, by string
	var all bool
	fs.StringVar(&file, "f", "", "A dead-letter journal file (read only; reconciliations go to FILE.reconciled).")
	fs.StringVar(&file, "filename", "", "Same as -f.")
	fs.StringVar(&brokers, "brokers", "", "Kafka seed brokers, comma-separated, to read the forwarder's topic instead.")
	fs.StringVar(&topic, "topic", "", "The dead-letter topic (with --brokers).")
	fs.StringVar(&state, "state", "", "Only letters in this state: UNKNOWN_OUTCOME, TERMINAL_EXHAUSTED or BUDGET_EXHAUSTED.")
	fs.StringVar(&policy, "policy", "", "Only letters of this policy.")
	fs.StringVar(&since, "since", "", "Only letters from this time on: RFC 3339, or a duration before now (2h).")
	fs.StringVar(&until, "until", "", "Only letters before this time: RFC 3339, or a duration before now.")
	fs.BoolVar(&all, "all", false, "Include the letters already reconciled.")
	fs.StringVar(&note, "note", "", "reconcile: what was found (required).")
	fs.StringVar(&by, "by", os.Getenv("USER"), "reconcile: who reconciled.")
	if code, stop := parse(fs, args[1:]); stop {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "deadletters %s: "+format+"\n", append([]any{sub}, a...)...)
		return code
	}
	src, err := sourceOf(file, brokers, topic)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	var keep func(entry) bool
	if keep, err = filterOf(state, policy, since, until, all, time.Now()); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if sub == "reconcile" && (fs.NArg() == 0 || strings.TrimSpace(note) == "") {
		return fail(exitUsage, "name the letters by IDENTITY (as list shows them) and say what was found with --note")
	}
	if sub != "reconcile" && fs.NArg() > 0 {
		return fail(exitUsage, "unexpected arguments %q", fs.Args())
	}
	entries, err := src.read(ctx)
	if err != nil && len(entries) == 0 {
		return fail(exitUnreadable, "%v", err)
	}
	if err != nil { // a damaged journal: every intact letter was read
		fmt.Fprintf(stderr, "deadletters %s: warning: %v\n", sub, err)
	}
	switch sub {
	case "reconcile":
		return reconcileLetters(ctx, src, entries, fs.Args(), note, by, stdout, fail)
	case "export":
		enc := json.NewEncoder(stdout)
		for _, e := range entries {
			if keep(e) {
				if err := enc.Encode(e); err != nil {
					return fail(exitFailed, "%v", err)
				}
			}
		}
	default:
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "AT\tSTATE\tCODE\tATTEMPTS\tIDENTITY\tRECONCILED")
		for _, e := range entries {
			if !keep(e) {
				continue
			}
			rec := "-"
			if e.Reconciled != nil {
				rec = e.Reconciled.At.UTC().Format(time.RFC3339) + " " + e.Reconciled.Note
			}
			l := e.Letter
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", l.At.UTC().Format(time.RFC3339), l.State, l.Code, len(l.Attempts), e.Identity, rec)
		}
		_ = w.Flush()
	}
	return exitOK
}

func reconcileLetters(ctx context.Context, src letterSource, entries []entry, ids []string, note, by string, stdout io.Writer,
	fail func(int, string, ...any) int) int {
	var marks []reconciliation
	now := time.Now().UTC()
	for _, id := range ids {
		e, err := letterNamed(entries, id)
		if err != nil {
			return fail(exitUnreadable, "%v; nothing was marked", err)
		}
		marks = append(marks, reconciliation{Identity: e.Identity, At: now, By: by, Note: note, key: deadletter.Identity(e.Letter)})
	}
	if err := src.reconcile(ctx, marks); err != nil {
		return fail(exitFailed, "%v", err)
	}
	for _, m := range marks {
		fmt.Fprintf(stdout, "reconciled %s\n", m.Identity)
	}
	return exitOK
}

// letterNamed is the letter id names: by its letterID, or by its
// operation's identity when exactly one letter not yet reconciled has it.
func letterNamed(entries []entry, id string) (entry, error) {
	var open []string
	var found entry
	for _, e := range entries {
		if e.Identity == id {
			return e, nil
		}
		if e.Reconciled == nil && deadletter.Identity(e.Letter) == id {
			open, found = append(open, e.Identity), e
		}
	}
	switch len(open) {
	case 0:
		return entry{}, fmt.Errorf("no dead letter %q (list shows each letter's IDENTITY)", id)
	case 1:
		return found, nil
	}
	return entry{}, fmt.Errorf("%q names %d letters not yet reconciled (%s): name one by the IDENTITY list shows", id, len(open), strings.Join(open, ", "))
}

// sourceOf is the journal file, or the topic.
func sourceOf(file, brokers, topic string) (letterSource, error) {
	switch {
	case file != "" && (brokers != "" || topic != ""):
		return nil, errors.New("-f reads a journal file, --brokers and --topic a Kafka topic: give one or the other")
	case file != "":
		return journalFile(file), nil
	case brokers != "" && topic != "":
		return &kafkaTopic{brokers: strings.Split(brokers, ","), topic: topic}, nil
	}
	return nil, errors.New("give a journal file with -f, or a Kafka topic with --brokers and --topic")
}

// filterOf builds the filter of the flags; durations count back from now.
func filterOf(state, policy, since, until string, all bool, now time.Time) (func(entry) bool, error) {
	states := []retry.State{retry.UnknownOutcome, retry.TerminalExhausted, retry.BudgetExhausted}
	if state != "" && !slices.Contains(states, retry.State(state)) {
		return nil, fmt.Errorf("--state %q: a dead letter's state is UNKNOWN_OUTCOME, TERMINAL_EXHAUSTED or BUDGET_EXHAUSTED", state)
	}
	from, err := timeFlag("--since", since, now)
	if err != nil {
		return nil, err
	}
	to, err := timeFlag("--until", until, now)
	if err != nil {
		return nil, err
	}
	return func(e entry) bool {
		l := e.Letter
		return (all || e.Reconciled == nil) && (state == "" || l.State == retry.State(state)) &&
			(policy == "" || l.Policy == policy) && (from.IsZero() || !l.At.Before(from)) && (to.IsZero() || l.At.Before(to))
	}, nil
}

func timeFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: give an RFC 3339 time (2026-12-01T09:00:00Z) or a duration before now (2h)", name, v)
	}
	return t, nil
}

// journalFile is a dead-letter journal, read without its writer's lock
// (deadletter.ReadAll), and its ledger of reconciliations beside it.
type journalFile string

func (j journalFile) ledger() string { return string(j) + ".reconciled" }

func (j journalFile) read(context.Context) ([]entry, error) {
	letters, readErr := deadletter.ReadAll(string(j))
	if readErr != nil && letters == nil {
		return nil, readErr
	}
	marks := map[string]reconciliation{}
	f, err := os.Open(j.ledger())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		defer f.Close()
		lines := bufio.NewScanner(f)
		for n := 1; lines.Scan(); n++ {
			var r reconciliation
			if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
				return nil, fmt.Errorf("%s line %d: %w", j.ledger(), n, err)
			}
			marks[r.Identity] = r
		}
		if err := lines.Err(); err != nil {
			return nil, err
		}
	}
	return withMarks(letters, marks), readErr
}

func (j journalFile) reconcile(_ context.Context, marks []reconciliation) error {
	var buf []byte
	for _, m := range marks {
		line, err := json.Marshal(m)
		if err != nil {
			return err
		}
		buf = append(append(buf, line...), '\n')
	}
	f, err := os.OpenFile(j.ledger(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// withMarks pairs letters with their reconciliations.
func withMarks(letters []retry.DeadLetter, marks map[string]reconciliation) []entry {
	out := make([]entry, 0, len(letters))
	for _, l := range letters {
		e := entry{Identity: letterID(l), Letter: l}
		if r, ok := marks[e.Identity]; ok {
			e.Reconciled = &r
		}
		out = append(out, e)
	}
	return out
}

// kafkaTopic is the forwarder's topic: letters keyed by their operation's
// identity, and reconciliation records under the same keys (so on the same
// partition, after the letter), each naming its letter by letterID. The
// topic must not be compacted (docs/deadletter-journal.md).
type kafkaTopic struct {
	brokers []string
	topic   string
}

// topicTimeout bounds reading the topic to its end.
const topicTimeout = 30 * time.Second

func (k *kafkaTopic) read(ctx context.Context) ([]entry, error) {
	ctx, cancel := context.WithTimeout(ctx, topicTimeout)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...))
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, k.topic)
	admin.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("reading the end of topic %s: %w", k.topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	consumer, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(k.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	var letters []retry.DeadLetter
	seen := map[string]int{} // letterID to index in letters: a letter delivered twice shows once
	marks := map[string]reconciliation{}
	for len(left) > 0 {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading topic %s: %w (%d partitions not read to their end)", k.topic, ctx.Err(), len(left))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == reconciledHeader }) {
				var m reconciliation
				if json.Unmarshal(r.Value, &m) == nil {
					marks[m.Identity] = m
				}
				return
			}
			var l retry.DeadLetter
			if json.Unmarshal(r.Value, &l) != nil {
				return
			}
			id := letterID(l)
			if i, dup := seen[id]; dup { // at-least-once: a duplicate
				letters[i] = l
				return
			}
			seen[id] = len(letters)
			letters = append(letters, l)
		})
	}
	return withMarks(letters, marks), nil
}

func (k *kafkaTopic) reconcile(ctx context.Context, marks []reconciliation) error {
	client, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...))
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, topicTimeout)
	defer cancel()
	var records []*kgo.Record
	for _, m := range marks {
		value, err := json.Marshal(m)
		if err != nil {
			return err
		}
		records = append(records, &kgo.Record{Topic: k.topic, Key: []byte(m.key), Value: value,
			Headers: []kgo.RecordHeader{{Key: reconciledHeader, Value: []byte("true")}}})
	}
	return client.ProduceSync(ctx, records...).FirstErr()
}
