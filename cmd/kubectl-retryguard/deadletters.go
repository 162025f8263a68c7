package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
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

const deadlettersLong = `List, export and reconcile the dead letters of a journal file (-f) or of the
forwarder's Kafka topic (--brokers, --topic): list shows the letters not yet
reconciled (--all: every letter), export writes them as JSON lines, and
reconcile marks the named letters (by the IDENTITY list shows, or by the
operation's identity, namespace/policy/key, when one letter not yet reconciled
has it) reconciled. Filters: --state, --policy, --since, --until
(docs/deadletter-journal.md).

Exit status: 0 done; 4 the journal or the topic could not be read, or a letter
reconcile names is not there (nothing is marked); 5 a reconciliation could not
be written; 2 usage (docs/kubectl-plugin.md#exit-codes).`

const deadlettersExamples = `  kubectl cp auth/smsapp-7d9c:/var/lib/retryguard/dead-letters.journal dead-letters.journal
  kubectl retryguard deadletters list -f dead-letters.journal --state UNKNOWN_OUTCOME --since 2h
  kubectl retryguard deadletters list -f dead-letters.journal -o json | jq -r '.letters[].letter.key'
  kubectl retryguard deadletters export --brokers kafka:9092 --topic retryguard.deadletters --policy sms-2fa-dispatch > letters.jsonl
  kubectl retryguard deadletters reconcile -f dead-letters.journal --note "provider shows it delivered" auth/sms-2fa-dispatch/SMS-2FA-42-s1`

// reconciledHeader marks a record on the topic as a reconciliation, not a
// letter; its value is a reconciliation as JSON.
const reconciledHeader = "retryguard-reconciled"

// reconciliation is an operator's record that a letter's outcome is known
// and dealt with, and the letter's record key on the topic.
type reconciliation struct {
	output.Reconciliation
	key string
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

// entry is one dead letter and its reconciliation, if any: a line of
// export, an item of list -o json|yaml.
type entry = output.DeadLetterEntry

// letterSource is where the letters are read and reconciliations written.
type letterSource interface {
	read(ctx context.Context) ([]entry, error)
	reconcile(ctx context.Context, r []reconciliation) error
}

func newDeadlettersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "deadletters",
		Short:   "List, export and reconcile dead letters",
		Long:    deadlettersLong,
		Example: deadlettersExamples,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			_ = cmd.Usage()
			return exitWith(exitUsage)
		},
	}
	cmd.AddCommand(newDeadlettersReadCommand("list", "List the dead letters not yet reconciled (--all: every letter)"),
		newDeadlettersReadCommand("export", "Write the dead letters as JSON lines, one letter and its reconciliation a line"),
		newDeadlettersReconcileCommand())
	return cmd
}

// sourceFlags are where the letters are: a journal file, or a topic.
type sourceFlags struct{ file, brokers, topic string }

func (s *sourceFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&s.file, "filename", "f", "", "A dead-letter journal file (read only; reconciliations go to FILE.reconciled).")
	f.StringVar(&s.brokers, "brokers", "", "Kafka seed brokers, comma-separated, to read the forwarder's topic instead.")
	f.StringVar(&s.topic, "topic", "", "The dead-letter topic (with --brokers).")
	_ = cmd.MarkFlagFilename("filename")
}

// read reads every letter of the source; a damaged journal is read up to
// its damage, with a warning.
func (s *sourceFlags) read(cmd *cobra.Command) (letterSource, []entry, error) {
	src, err := sourceOf(s.file, s.brokers, s.topic)
	if err != nil {
		return nil, nil, exitf(exitUsage, "deadletters %s: %v", cmd.Name(), err)
	}
	entries, err := src.read(cmd.Context())
	if err != nil && len(entries) == 0 {
		return nil, nil, exitf(exitUnreadable, "deadletters %s: %v", cmd.Name(), err)
	}
	if err != nil { // a damaged journal: every intact letter was read
		fmt.Fprintf(cmd.ErrOrStderr(), "deadletters %s: warning: %v\n", cmd.Name(), err)
	}
	return src, entries, nil
}

// newDeadlettersReadCommand is list or export: the letters the filters keep.
func newDeadlettersReadCommand(name, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     name + " (-f JOURNAL | --brokers HOST:PORT --topic TOPIC) [--state STATE] [--policy NAME] [--since T] [--until T] [--all]",
		Short:   short,
		Long:    deadlettersLong,
		Example: deadlettersExamples,
		Args:    cobra.NoArgs,
	}
	var src sourceFlags
	src.register(cmd)
	var state, policy, since, until string
	var all bool
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "Only letters in this state: UNKNOWN_OUTCOME, TERMINAL_EXHAUSTED or BUDGET_EXHAUSTED.")
	f.StringVar(&policy, "policy", "", "Only letters of this policy.")
	f.StringVar(&since, "since", "", "Only letters from this time on: RFC 3339, or a duration before now (2h).")
	f.StringVar(&until, "until", "", "Only letters before this time: RFC 3339, or a duration before now.")
	f.BoolVar(&all, "all", false, "Include the letters already reconciled.")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(
		[]string{string(retry.UnknownOutcome), string(retry.TerminalExhausted), string(retry.BudgetExhausted)}, cobra.ShellCompDirectiveNoFileComp))
	format := new(string)
	if name == "list" {
		format = outputFlag(cmd, outputText)
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if name == "list" {
			if err := checkOutput(cmd, *format, outputText); err != nil {
				return err
			}
		}
		keep, err := filterOf(state, policy, since, until, all, time.Now())
		if err != nil {
			return exitf(exitUsage, "deadletters %s: %v", name, err)
		}
		_, entries, err := src.read(cmd)
		if err != nil {
			return err
		}
		kept := []entry{}
		for _, e := range entries {
			if keep(e) {
				kept = append(kept, e)
			}
		}
		if name == "export" {
			enc := json.NewEncoder(cmd.OutOrStdout())
			for _, e := range kept {
				if err := enc.Encode(e); err != nil {
					return exitf(exitFailed, "deadletters export: %v", err)
				}
			}
			return nil
		}
		return printLetters(cmd, *format, kept)
	}
	return cmd
}

// printLetters prints letters as list does: a table, or a DeadLetterList.
func printLetters(cmd *cobra.Command, format string, letters []entry) error {
	if output.IsMachine(format) {
		return writeOutput(cmd, format, output.DeadLetterList{TypeMeta: output.Meta(output.KindDeadLetterList), Letters: letters})
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AT\tSTATE\tCODE\tATTEMPTS\tIDENTITY\tRECONCILED")
	for _, e := range letters {
		rec := "-"
		if e.Reconciled != nil {
			rec = e.Reconciled.At.UTC().Format(time.RFC3339) + " " + e.Reconciled.Note
		}
		l := e.Letter
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", l.At.UTC().Format(time.RFC3339), l.State, l.Code, len(l.Attempts), e.Identity, rec)
	}
	return w.Flush()
}

func newDeadlettersReconcileCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "reconcile (-f JOURNAL | --brokers HOST:PORT --topic TOPIC) --note TEXT IDENTITY...",
		Short:   "Mark letters reconciled, saying what was found",
		Long:    deadlettersLong,
		Example: deadlettersExamples,
	}
	var src sourceFlags
	src.register(cmd)
	var note, by string
	f := cmd.Flags()
	f.StringVar(&note, "note", "", "What was found (required).")
	f.StringVar(&by, "by", os.Getenv("USER"), "Who reconciled.")
	format := outputFlag(cmd, outputText)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		if err := checkOutput(cmd, *format, outputText); err != nil {
			return err
		}
		if len(ids) == 0 || strings.TrimSpace(note) == "" {
			return exitf(exitUsage, "deadletters reconcile: name the letters by IDENTITY (as list shows them) and say what was found with --note")
		}
		letters, entries, err := src.read(cmd)
		if err != nil {
			return err
		}
		marked, err := reconcileLetters(cmd.Context(), letters, entries, ids, note, by)
		if err != nil {
			return err
		}
		if output.IsMachine(*format) {
			return printLetters(cmd, *format, marked)
		}
		for _, e := range marked {
			fmt.Fprintf(cmd.OutOrStdout(), "reconciled %s\n", e.Identity)
		}
		return nil
	}
	return cmd
}

// reconcileLetters marks the letters ids name, all or none, and returns
// them with their reconciliation.
func reconcileLetters(ctx context.Context, src letterSource, entries []entry, ids []string, note, by string) ([]entry, error) {
	var marks []reconciliation
	var marked []entry
	now := time.Now().UTC()
	for _, id := range ids {
		e, err := letterNamed(entries, id)
		if err != nil {
			return nil, exitf(exitUnreadable, "deadletters reconcile: %v; nothing was marked", err)
		}
		m := reconciliation{Reconciliation: output.Reconciliation{Identity: e.Identity, At: now, By: by, Note: note}, key: deadletter.Identity(e.Letter)}
		marks = append(marks, m)
		e.Reconciled = &m.Reconciliation
		marked = append(marked, e)
	}
	if err := src.reconcile(ctx, marks); err != nil {
		return nil, exitf(exitFailed, "deadletters reconcile: %v", err)
	}
	return marked, nil
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
			e.Reconciled = &r.Reconciliation
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
