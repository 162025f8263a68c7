package main

import (
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const script = "../run_telephony_retry_recovery_drill.sh"

// runScript runs the drill script and returns its exit status and report.
func runScript(t *testing.T, args ...string) (int, *report) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(script, append(args, "--out", out)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr // the drill's log, for the test's output
	err := cmd.Run()
	status := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		status = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("exit status %d and no report: %v", status, err)
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, "drill.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() < 600 {
		t.Fatalf("drill.png: %v", err)
	}
	return status, &rep
}

func optionOf(t *testing.T, rep *report, name string) optionReport {
	t.Helper()
	for _, o := range rep.Options {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("the report has no option %s", name)
	return optionReport{}
}

// The quick drill, the recovery drill's regression guard: Retryguard meets
// the spec, the rejected options do not, and every logical operation is
// accounted for.
func TestQuickDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s real-time drill")
	}
	status, rep := runScript(t, "--quick")
	load := 18
	if !rep.Scenario.Quick || rep.Scenario.RPS != 1200 || rep.Scenario.BanLimit != 1320 ||
		rep.Policy.Source.Kind != "files" || rep.Policy.Enforcement != "Enforced" || rep.Policy.BudgetPct != 10 {
		t.Errorf("scenario %+v, policy %+v", rep.Scenario, rep.Policy)
	}
	c := optionOf(t, rep, "C")
	for _, name := range []string{"A", "B", "C"} {
		o := optionOf(t, rep, name)
		if o.Summary.Offered != load*1200 || len(o.Series.Outbound) < load || len(o.Series.Primary) != len(o.Series.Outbound) {
			t.Errorf("%s: %d offered, %d seconds of series", name, o.Summary.Offered, len(o.Series.Outbound))
		}
	}
	// Exact counts, whatever the machine's load.
	if s := c.Summary; s.Lost != 0 || s.Dispatched+s.DeadLettered != s.Offered || s.DeadLettered == 0 {
		t.Errorf("C: %+v", s)
	}
	// Every failure's letter went to the journal on disk, the outbox, and
	// reached the queue, with the queue's broker killed and back mid-fault.
	if q := rep.Queue; q.Delivered != c.Summary.DeadLettered || q.LeftInJournal != 0 || q.Forwarded < uint64(q.Delivered) ||
		q.BrokerKilledAt <= 0 || q.BrokerBackAt <= q.BrokerKilledAt || q.JournalFS == "" || strings.HasPrefix(rep.Policy.Journal, "/dev/shm") {
		t.Errorf("the fallback queue: %+v, journal %s", q, rep.Policy.Journal)
	}
	if c.Summary.MaxBucketRatio > maxRatio || c.Summary.AmplificationDuringFault > guardRatio {
		t.Errorf("C: outbound/primary %.3f (worst second %.3f)", c.Summary.AmplificationDuringFault, c.Summary.MaxBucketRatio)
	}
	for _, name := range []string{"A", "B"} {
		// Unloaded, A and B send 2.3 and 1.9 attempts per primary; a busy
		// machine delays their retries past the fault, so only 1.2 is
		// asserted, and only on schedule: a machine that stalls the load
		// for seconds pushes even that much past the fault.
		o := optionOf(t, rep, name)
		if o.Verdict.Pass || rep.OffSchedule == "" && o.Summary.AmplificationDuringFault < 1.2 {
			t.Errorf("%s passed, or barely retried: %+v", name, o.Summary)
		}
		if o.Summary.AmplificationDuringFault <= c.Summary.AmplificationDuringFault {
			t.Errorf("C's outbound/primary %.3f is not below %s's %.3f", c.Summary.AmplificationDuringFault, name, o.Summary.AmplificationDuringFault)
		}
	}
	onSchedule(t, rep, c)
	if len(c.Series.BudgetTokens) == 0 || len(c.Series.BudgetDenials) != len(c.Series.Outbound) {
		t.Errorf("C's budget series: %d tokens, %d denials", len(c.Series.BudgetTokens), len(c.Series.BudgetDenials))
	}
	switch {
	case status == exitPass && rep.Pass && c.Verdict.Pass && c.Summary.RetryBans == 0 && c.Summary.RecoverySeconds <= maxRecovery.Seconds():
	case status == exitInconclusive && rep.Inconclusive != "" && c.Verdict.TimingOnly:
		t.Skipf("the machine kept the load off schedule (%s); C's timing marks are unjudged: %s",
			rep.Inconclusive, strings.Join(c.Verdict.Failures, "; "))
	default:
		t.Fatalf("exit status %d, pass %v: %v", status, rep.Pass, c.Verdict.Failures)
	}
}

// guardRatio is the regression guard on C's outbound per primary, tighter
// than the spec's 10% (maxRatio): at 10% of successes, with 40% of the
// fault's attempts succeeding, C's retries come to about 4% of its
// primaries (1.040 in a quiet full run, docs/benchmarks.md).
const guardRatio = 1.05

// onSchedule holds C's per-second figures, which only a run whose load
// arrived on schedule can judge, to the regression guard: within
// guardRatio of its primaries and under the ban limit in every whole
// second of load, the first included, where the executor is new and its
// start credit lets the first failures retry.
func onSchedule(t *testing.T, rep *report, c optionReport) {
	t.Helper()
	if rep.OffSchedule != "" {
		t.Logf("C's per-second marks unjudged: the machine kept the load off schedule (%s)", rep.OffSchedule)
		return
	}
	s := c.Series
	if s.Retries[0] == 0 {
		t.Errorf("no retry in the first second of a new executor (%d primaries)", s.Primary[0])
	}
	if first := float64(s.Outbound[0]) / float64(s.Primary[0]); first > guardRatio {
		t.Errorf("first second: %d attempts for %d primaries, above %.2f×", s.Outbound[0], s.Primary[0], guardRatio)
	}
	if c.Summary.MaxBucketRatio > guardRatio {
		t.Errorf("second %d: outbound/primary %.3f, above %.2f×", c.Summary.MaxRatioSecond, c.Summary.MaxBucketRatio, guardRatio)
	}
	if c.Summary.PeakOutbound > rep.Scenario.BanLimit {
		t.Errorf("C sent %d attempts in one second, over %d", c.Summary.PeakOutbound, rep.Scenario.BanLimit)
	}
}

// With its budget's limits lifted, Retryguard storms like Option B and the
// drill fails it, on exact counts that no machine load can excuse.
func TestQuickDrillFailsWithoutTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s real-time drill")
	}
	status, rep := runScript(t, "--quick", "--options", "C", "--break", "budget")
	c := optionOf(t, rep, "C")
	if status != exitFail || rep.Pass || rep.Inconclusive != "" || c.Verdict.TimingOnly {
		t.Fatalf("exit status %d, pass %v, inconclusive %q: %v", status, rep.Pass, rep.Inconclusive, c.Verdict.Failures)
	}
	if c.Summary.MaxBucketRatio <= maxRatio || !strings.Contains(strings.Join(c.Verdict.Failures, "\n"), "outbound/primary") {
		t.Fatalf("without a budget C kept outbound/primary at %.2f: %v", c.Summary.MaxBucketRatio, c.Verdict.Failures)
	}
}
