package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/hack/drills/fleet/clientstats"
	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
)

// run is a 20 s run of 300 primaries a second against 400/s, the trigger
// on from 5 s to 13 s; each second's retries come from retries(i).
func run(mode string, retries func(i int) int, clients Clients) *Run {
	s := depseries.Series{Capacity: 400, Triggers: []depseries.Window{{Kind: depseries.Outage, From: 5, To: 13}}}
	for i := range 20 {
		r := retries(i)
		s.Seconds = append(s.Seconds, depseries.Second{Received: 300 + r, First: 300, Retry: r, Applied: 300})
	}
	return &Run{Trigger: depseries.Outage, Mode: mode, PrimaryRate: 300, LoadSeconds: 20.3, Series: s, Clients: clients}
}

func TestRetryguardRunMeetsTheGoals(t *testing.T) {
	r := run(Retryguard, func(i int) int {
		if i >= 5 && i < 13 {
			return 20
		}
		return 0
	}, Clients{Started: 6000, Succeeded: 5000, Failed: 1000, Unknown: 10, Letters: map[string]int{"ERR_UNKNOWN_OUTCOME": 10, "ERR_BUDGET_EXHAUSTED": 990},
		UnknownLetters: 10})
	if err := r.Compute(10); err != nil {
		t.Fatal(err)
	}
	f := r.Figures
	if !r.Verdict.Pass || len(f.WindowRatios) != 1 || f.MaxSecondRatio > 1.07 || f.RecoverySeconds != 0 || !f.Recovered || f.Lost != 0 {
		t.Errorf("verdict %+v, figures %+v", r.Verdict, f)
	}
	// 160 retries over the 20 s window's 6000 primaries.
	if want := 160.0 / 6000; f.WindowRatios[0] != want {
		t.Errorf("window ratio %v, want %v", f.WindowRatios[0], want)
	}
}

// TestRetryguardRunFailsEachGoal: each goal is held on its own.
func TestRetryguardRunFailsEachGoal(t *testing.T) {
	ok := Clients{Started: 6000, Succeeded: 6000, Letters: map[string]int{}}
	for name, tc := range map[string]struct {
		retries func(int) int
		clients Clients
		want    string
	}{
		"a second above 1.10": {func(i int) int { return map[int]int{0: 40}[i] }, ok, "in second 0"},
		"over capacity after": {func(i int) int { return map[int]int{15: 150}[i] }, ok, "back under capacity 3.0 s"},
		"a window above 11%":  {func(int) int { return 36 }, ok, "retries/primaries 0.120"},
		"a lost operation":    {func(int) int { return 0 }, Clients{Started: 6000, Succeeded: 5999, Failed: 1, Letters: map[string]int{}}, "1 operations lost"},
		"no terminal state": {func(int) int { return 0 },
			Clients{Started: 6000, Succeeded: 5999, InFlight: 1, Letters: map[string]int{}}, "1 without a terminal state"},
		"a letter the journal does not hold": {func(int) int { return 0 },
			Clients{Started: 6000, Succeeded: 5999, Failed: 1, Letters: map[string]int{"ERR_RETRY_LIMIT_EXCEEDED": 1}, Unconfirmed: 1}, "1 operations lost"},
		"an unlettered unknown": {func(int) int { return 0 },
			Clients{Started: 6000, Succeeded: 5999, Failed: 1, Unknown: 1, Letters: map[string]int{"ERR_RETRY_LIMIT_EXCEEDED": 1}}, "1 unknown outcomes, 0 letters"},
	} {
		t.Run(name, func(t *testing.T) {
			r := run(Retryguard, tc.retries, tc.clients)
			if err := r.Compute(10); err != nil {
				t.Fatal(err)
			}
			if r.Verdict.Pass || !strings.Contains(strings.Join(r.Verdict.Failures, "; "), tc.want) {
				t.Errorf("verdict %+v, want a failure saying %q", r.Verdict, tc.want)
			}
		})
	}
	r := run(Retryguard, func(int) int { return 0 }, ok)
	r.Series.Seconds[3].Duplicates = 2
	if err := r.Compute(10); err != nil || r.Verdict.Pass || r.Verdict.Failures[0] != "2 duplicates applied" {
		t.Errorf("duplicates: %+v %v", r.Verdict, err)
	}
}

// TestNaiveRunReproducesOnlyWhenTheStormOutlivesTheTrigger.
func TestNaiveRunReproducesOnlyWhenTheStormOutlivesTheTrigger(t *testing.T) {
	storm := run(Naive, func(i int) int {
		if i >= 5 {
			return 5000
		}
		return 0
	}, Clients{})
	brief := run(Naive, func(i int) int {
		if i >= 5 && i < 15 {
			return 5000
		}
		return 0
	}, Clients{})
	// A second's dip in a storm that goes on is still a storm.
	dip := run(Naive, func(i int) int {
		if i >= 5 && i != 15 {
			return 5000
		}
		return 0
	}, Clients{})
	for _, r := range []*Run{storm, brief, dip} {
		if err := r.Compute(5); err != nil {
			t.Fatal(err)
		}
	}
	if !*storm.Verdict.Reproduced || storm.Figures.Recovered {
		t.Errorf("a storm to the end: %+v %+v", storm.Verdict, storm.Figures)
	}
	if *brief.Verdict.Reproduced || !strings.Contains(brief.Verdict.Failures[0], "over capacity in 2 of the 5 seconds") {
		t.Errorf("a storm 2 s past the trigger, 5 required: %+v", brief.Verdict)
	}
	if !*dip.Verdict.Reproduced {
		t.Errorf("a storm with a second's dip: %+v", dip.Verdict)
	}
	if brief.Figures.RecoverySeconds != 2 || brief.Figures.OverAfter != 2 {
		t.Errorf("recovery: %+v", brief.Figures)
	}
}

func TestWriteReportAndPlot(t *testing.T) {
	rep := &Report{Capacity: 400, PrimaryRate: 300, Pods: 20, Namespaces: 2, Quick: true, SustainFor: 5,
		PodsBy: map[string]int{clientstats.HTTP: 8, clientstats.GRPC: 6, clientstats.Sidecar: 6}}
	rep.Runs = []*Run{
		run(Naive, func(i int) int { return 5000 * min(1, i/5) }, Clients{}),
		run(Retryguard, func(int) int { return 0 }, Clients{Letters: map[string]int{},
			ByClient: map[string]Operations{clientstats.GRPC: {Pods: 6, Started: 1800, Succeeded: 1790, Failed: 10, Unknown: 2}}}),
	}
	for _, r := range rep.Runs {
		if err := r.Compute(5); err != nil {
			t.Fatal(err)
		}
	}
	// A second without primaries (a stalled node): the report still encodes.
	rep.Runs[0].Series.Seconds[7].First = 0
	for _, r := range rep.Runs {
		if err := r.Compute(5); err != nil {
			t.Fatal(err)
		}
	}
	if got := rep.Runs[0].Figures.MaxSecondRatio; got != 5300 {
		t.Errorf("a second of 5,300 requests and no primary: ratio %v, want 5300 (as if one)", got)
	}
	rep.Finish()
	dir := t.TempDir()
	if err := Write(dir, rep); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "fleet-drill.svg"))
	if err != nil || !strings.Contains(string(svg), "<svg") {
		t.Fatalf("fleet-drill.svg: %v", err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"| outage | naive |", "storm sustained", "| outage | retryguard |", "| pass |",
		"(8 on retry.RoundTripper, 6 on runtime/grpc, 6 through the sidecar)",
		"outage retryguard: grpc 6 pods, 1800 started, 1790 succeeded, 10 failed (2 unknown)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	js, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	if !strings.Contains(string(js), `"received": [5000,`) && !strings.Contains(string(js), `"received": [300,`) {
		t.Errorf("report.json does not hold the series on one line:\n%.600s", js)
	}
	if !rep.Pass {
		t.Errorf("the report failed: %+v", rep.Runs[0].Verdict)
	}
}

// A letter a sidecar announced that its journal does not hold is an
// operation lost, and the table says why.
func TestTheReportSaysWhichLettersTheJournalDoesNotHold(t *testing.T) {
	r := run(Retryguard, func(int) int { return 0 }, Clients{Started: 6000, Succeeded: 5999, Failed: 1,
		Letters: map[string]int{"ERR_RETRY_LIMIT_EXCEEDED": 1}, Unconfirmed: 1})
	if err := r.Compute(10); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Capacity: 400, PrimaryRate: 300, Pods: 20, Namespaces: 2, Runs: []*Run{r}}
	if md := Markdown(rep); !strings.Contains(md, "| 1 (1 letters a sidecar announced and its journal does not hold) |") || r.Verdict.Pass {
		t.Errorf("verdict %+v; the table:\n%s", r.Verdict, md)
	}
}
