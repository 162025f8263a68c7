// Package fleet is the fleet drill's report: what the dependency saw of a
// fleet of client pods, per trigger and per run (naive retries and
// Retryguard), the figures the goals are held to, and the plot, in the
// format the recovery drill's report shares (hack/drills/drillreport).
package fleet

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/retryguard/retryguard/hack/drills/drillreport"
	"github.com/retryguard/retryguard/hack/drills/fleet/clientstats"
	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
)

// The modes of a run.
const (
	Naive      = "naive"
	Retryguard = "retryguard"
)

// The goals of the Retryguard run (RETRY-SMS-001: INV-RTY-04, MC-RT-01).
const (
	// MaxWindowRatio bounds retries/primaries at the dependency in every
	// 60 s window: 10%, plus one point.
	MaxWindowRatio = 0.11
	// MaxSecondRatio bounds received/primaries in every second, the first
	// included.
	MaxSecondRatio = 1.10
	// MaxRecoverySeconds is how soon after the trigger's end the dependency
	// must be back under capacity.
	MaxRecoverySeconds = 2.5
	// Window is the ratio's window, in seconds.
	Window = 60
	// MinSustainedShare is the share of the seconds after the trigger in
	// which a naive storm that sustained itself keeps the dependency over
	// capacity.
	MinSustainedShare = 0.8
)

// Clients is what the fleet's pods counted of a run's operations.
type Clients struct {
	Pods      int `json:"pods"`
	Started   int `json:"started"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Unknown: failed with an unknown outcome (the dependency may have
	// applied them). InFlight: without a terminal state when the drill
	// stopped waiting. Refused: never begun (a pod's in-flight bound).
	Unknown  int `json:"unknown"`
	InFlight int `json:"inFlight"`
	Refused  int `json:"refused"`
	// Letters are the dead letters of the run, by code: those a Go
	// client's journal stored, and those a sidecar announced in its answers;
	// Unconfirmed those a sidecar announced and its journal does not hold
	// (clientstats.Stats.Unconfirmed), counted as lost.
	Letters     map[string]int `json:"letters"`
	Unconfirmed int            `json:"unconfirmed,omitempty"`
	// UnknownLetters are the letters of operations whose outcome is
	// unknown (clientstats.Stats.UnknownLetters).
	UnknownLetters int `json:"unknownLetters"`
	// FailedBy counts the failed operations by final code, Examples holds
	// one failure's detail for each.
	FailedBy map[string]int    `json:"failedBy"`
	Examples map[string]string `json:"examples,omitempty"`
	// MaxLateMs is how late a pod began an operation at worst: a busy
	// node delays the open-loop schedule.
	MaxLateMs float64 `json:"maxLateMs"`
	// ByClient splits the operations by how their pods reach the
	// dependency (clientstats.Clients).
	ByClient map[string]Operations `json:"byClient,omitempty"`
}

// Operations are the counts of one part of the fleet.
type Operations struct {
	Pods      int `json:"pods"`
	Started   int `json:"started"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
}

// Run is one run of one trigger.
type Run struct {
	Trigger string `json:"trigger"`
	Mode    string `json:"mode"`
	// PrimaryRate is the operations a second the fleet began.
	PrimaryRate int `json:"primaryRate"`
	// LoadSeconds is when the fleet stopped beginning operations, in
	// seconds since the series began.
	LoadSeconds float64            `json:"loadSeconds"`
	Series      depseries.Series   `json:"series"`
	Clients     Clients            `json:"clients"`
	Figures     Figures            `json:"figures"`
	Verdict     Verdict            `json:"verdict"`
	seconds     []depseries.Second // the whole seconds of load
}

// Figures are the run's published figures, at the dependency.
type Figures struct {
	Received []int `json:"received"`
	Retries  []int `json:"retries"`
	// WindowRatios is retries/primaries in each 60 s window of the load,
	// sliding by a second; a load shorter than 60 s is one window.
	WindowRatios   []float64 `json:"windowRatios"`
	MaxWindowRatio float64   `json:"maxWindowRatio"`
	// PeakReceived is the busiest second, PeakSecond which; MaxSecondRatio
	// the largest received/primaries of a second, in MaxRatioSecond.
	PeakReceived   int     `json:"peakReceived"`
	PeakSecond     int     `json:"peakSecond"`
	MaxSecondRatio float64 `json:"maxSecondRatio"`
	MaxRatioSecond int     `json:"maxRatioSecond"`
	// RecoverySeconds is from the trigger's end until the dependency was
	// under capacity in every later second of the load; Recovered is false
	// when it was still over at the end (RecoverySeconds is then a lower
	// bound), and OverAfter counts the seconds over capacity after the end.
	RecoverySeconds float64 `json:"recoverySeconds"`
	Recovered       bool    `json:"recovered"`
	OverAfter       int     `json:"overAfter"`
	Duplicates      int     `json:"duplicates"`
	Applied         int     `json:"applied"`
	// NonTerminal operations had no terminal state; Lost are those and the
	// failed operations no letter holds. UnknownLettered counts the
	// letters of unknown outcomes.
	NonTerminal     int `json:"nonTerminal"`
	Lost            int `json:"lost"`
	Unknown         int `json:"unknown"`
	UnknownLettered int `json:"unknownLettered"`
}

// Verdict is a run's judgement: the goals, for the Retryguard run; whether
// the storm sustained itself, for the naive one.
type Verdict struct {
	Pass       bool     `json:"pass"`
	Failures   []string `json:"failures"`
	Reproduced *bool    `json:"reproduced,omitempty"`
}

// Report is report.json.
type Report struct {
	Capacity    int `json:"capacity"`
	PrimaryRate int `json:"primaryRate"`
	Pods        int `json:"pods"`
	Namespaces  int `json:"namespaces"`
	// PodsBy counts the pods by how they reach the dependency
	// (clientstats.Clients).
	PodsBy     map[string]int `json:"podsBy,omitempty"`
	Quick      bool           `json:"quick"`
	SustainFor int            `json:"sustainForSeconds"`
	Runs       []*Run         `json:"runs"`
	Pass       bool           `json:"pass"`
}

// trigger is the run's trigger window.
func (r *Run) trigger() (depseries.Window, error) {
	for _, w := range r.Series.Triggers {
		if w.Kind == r.Trigger {
			return w, nil
		}
	}
	return depseries.Window{}, fmt.Errorf("%s run of %s: the dependency's series holds no %s trigger (%v)", r.Mode, r.Trigger, r.Trigger, r.Series.Triggers)
}

// Compute fills the run's figures and verdict; sustainFor is how many
// seconds past the trigger's end the naive storm must last to count as
// sustained.
func (r *Run) Compute(sustainFor int) error {
	w, err := r.trigger()
	if err != nil {
		return err
	}
	load := min(int(r.LoadSeconds), len(r.Series.Seconds))
	if load < 1 {
		return fmt.Errorf("%s run of %s: no whole second of load (%.1f s)", r.Mode, r.Trigger, r.LoadSeconds)
	}
	r.seconds = r.Series.Seconds[:load]
	f := Figures{}
	for i, s := range r.Series.Seconds {
		f.Received, f.Retries = append(f.Received, s.Received), append(f.Retries, s.Retry)
		f.Duplicates += s.Duplicates
		f.Applied += s.Applied
		if i < load && s.Received > f.PeakReceived {
			f.PeakReceived, f.PeakSecond = s.Received, i
		}
	}
	f.WindowRatios = windowRatios(r.seconds)
	for _, x := range f.WindowRatios {
		f.MaxWindowRatio = max(f.MaxWindowRatio, x)
	}
	for i, s := range r.seconds {
		if ratio := perPrimary(s.Received, s.First); ratio > f.MaxSecondRatio {
			f.MaxSecondRatio, f.MaxRatioSecond = ratio, i
		}
	}
	f.RecoverySeconds, f.Recovered, f.OverAfter = recovery(r.seconds, r.Series.Capacity, w.To)
	c := r.Clients
	lettered := 0
	for _, n := range c.Letters {
		lettered += n
	}
	f.UnknownLettered = c.UnknownLetters
	f.NonTerminal, f.Unknown = c.InFlight, c.Unknown
	f.Lost = c.InFlight + max(0, c.Failed-(lettered-c.Unconfirmed))
	r.Figures = f
	r.Verdict = r.judge(w, sustainFor)
	return nil
}

// windowRatios is retries/primaries over each Window-second window of
// seconds, sliding by one; fewer seconds than Window make one window.
func windowRatios(seconds []depseries.Second) []float64 {
	n := min(Window, len(seconds))
	var out []float64
	for from := 0; from+n <= len(seconds); from++ {
		var retries, firsts int
		for _, s := range seconds[from : from+n] {
			retries, firsts = retries+s.Retry, firsts+s.First
		}
		out = append(out, perPrimary(retries, firsts))
	}
	return out
}

// perPrimary is n per primary; no primary counts as one, so that n alone
// (a lower bound of the ratio, which JSON could not hold) is judged.
func perPrimary(n, primaries int) float64 { return float64(n) / float64(max(primaries, 1)) }

// recovery is the time from end (seconds since the series began) until
// every later second is under capacity; false when the last one is not.
func recovery(seconds []depseries.Second, capacity int, end float64) (float64, bool, int) {
	last, over := -1, 0
	for i, s := range seconds {
		if float64(i+1) <= end || !s.Over(capacity) {
			continue
		}
		last, over = i, over+1
	}
	if last < 0 {
		return 0, true, 0
	}
	return max(0, float64(last+1)-end), last < len(seconds)-1, over
}

func (r *Run) judge(w depseries.Window, sustainFor int) Verdict {
	f := r.Figures
	v := Verdict{Failures: []string{}}
	if r.Mode == Naive {
		// Sustained: still over capacity sustainFor seconds after the
		// trigger's end, and over in most of the seconds between (a node
		// the storm keeps busy can stall the clients for a second).
		from := int(math.Ceil(w.To))
		to := min(from+sustainFor, len(r.seconds))
		over := 0
		for i := from; i < to; i++ {
			if r.seconds[i].Over(r.Series.Capacity) {
				over++
			}
		}
		sustained := to > from && r.seconds[to-1].Over(r.Series.Capacity) && float64(over) >= MinSustainedShare*float64(to-from)
		v.Reproduced = &sustained
		if !sustained {
			v.Failures = append(v.Failures, fmt.Sprintf("the storm did not sustain itself: over capacity in %d of the %d seconds after the trigger's end "+
				"(%.0f%% and the last needed)", over, to-from, MinSustainedShare*100))
		}
		v.Pass = sustained
		return v
	}
	if f.MaxWindowRatio > MaxWindowRatio {
		v.Failures = append(v.Failures, fmt.Sprintf("retries/primaries %.3f in a %d s window, above %.2f",
			f.MaxWindowRatio, min(Window, len(r.seconds)), MaxWindowRatio))
	}
	if f.MaxSecondRatio > MaxSecondRatio {
		v.Failures = append(v.Failures, fmt.Sprintf("received/primaries %.3f in second %d, above %.2f", f.MaxSecondRatio, f.MaxRatioSecond, MaxSecondRatio))
	}
	if !f.Recovered || f.RecoverySeconds > MaxRecoverySeconds {
		v.Failures = append(v.Failures, fmt.Sprintf("back under capacity %.1f s after the trigger's end (recovered: %v), later than %.1f s",
			f.RecoverySeconds, f.Recovered, MaxRecoverySeconds))
	}
	if f.Duplicates > 0 {
		v.Failures = append(v.Failures, fmt.Sprintf("%d duplicates applied", f.Duplicates))
	}
	if f.Lost > 0 {
		v.Failures = append(v.Failures, fmt.Sprintf("%d operations lost: %d without a terminal state, the others failed without a letter", f.Lost, f.NonTerminal))
	}
	if f.UnknownLettered != f.Unknown {
		v.Failures = append(v.Failures, fmt.Sprintf("%d unknown outcomes, %d letters of one", f.Unknown, f.UnknownLettered))
	}
	v.Pass = len(v.Failures) == 0
	return v
}

// Finish judges the report: every run passes.
func (rep *Report) Finish() {
	rep.Pass = len(rep.Runs) > 0
	for _, r := range rep.Runs {
		rep.Pass = rep.Pass && r.Verdict.Pass
	}
}

// Write writes report.json, report.md and fleet-drill.svg into dir.
func Write(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := drillreport.EncodeJSON(rep)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(rep)), 0o644); err != nil {
		return err
	}
	return plotReport(rep, filepath.Join(dir, "fleet-drill.svg"))
}

// Markdown is the report's table, one row per run.
func Markdown(rep *Report) string {
	var b strings.Builder
	form := "full"
	if rep.Quick {
		form = "quick"
	}
	fmt.Fprintf(&b, "Fleet drill (%s form): %d pods in %d namespaces%s, %d operations/s against a dependency of %d requests/s.\n\n",
		form, rep.Pods, rep.Namespaces, podsBy(rep.PodsBy), rep.PrimaryRate, rep.Capacity)
	b.WriteString("| trigger | run | max retries/primaries (window) | peak second (received, ×primaries) | back under capacity | " +
		"duplicates applied | no terminal state | lost | unknown outcomes / letters | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Runs {
		f := r.Figures
		rec := fmt.Sprintf("%.1f s", f.RecoverySeconds)
		if !f.Recovered {
			rec = fmt.Sprintf("not by the load's end (≥ %.1f s)", f.RecoverySeconds)
		}
		verdict := "pass"
		switch {
		case r.Mode == Naive && r.Verdict.Pass:
			verdict = "storm sustained"
		case r.Mode == Naive:
			verdict = "did not reproduce"
		case !r.Verdict.Pass:
			verdict = "FAIL: " + strings.Join(r.Verdict.Failures, "; ")
		}
		lost := strconv.Itoa(f.Lost)
		if u := r.Clients.Unconfirmed; u > 0 {
			lost += fmt.Sprintf(" (%d letters a sidecar announced and its journal does not hold)", u)
		}
		fmt.Fprintf(&b, "| %s | %s | %.3f (%d s) | %d (×%.2f max) | %s | %d | %d | %s | %d / %d | %s |\n", r.Trigger, r.Mode, f.MaxWindowRatio,
			min(Window, len(r.seconds)), f.PeakReceived, f.MaxSecondRatio, rec, f.Duplicates, f.NonTerminal, lost, f.Unknown, f.UnknownLettered, verdict)
	}
	codes := map[string]int{}
	for _, r := range rep.Runs {
		for c, n := range r.Clients.FailedBy {
			codes[r.Mode+" "+c] += n
		}
	}
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		b.WriteString("\nFailed operations by final code, over every trigger: ")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", k, codes[k])
		}
		b.WriteString(".\n")
	}
	b.WriteString(byClient(rep))
	return b.String()
}

// byClient is the report's line of operations by client, per run, or ""
// when no run says.
func byClient(rep *Report) string {
	var runs []string
	for _, r := range rep.Runs {
		var parts []string
		for _, c := range clientstats.Clients {
			if o, ok := r.Clients.ByClient[c]; ok {
				parts = append(parts, fmt.Sprintf("%s %d pods, %d started, %d succeeded, %d failed (%d unknown)", c, o.Pods, o.Started, o.Succeeded, o.Failed, o.Unknown))
			}
		}
		if len(parts) > 0 {
			runs = append(runs, fmt.Sprintf("%s %s: %s", r.Trigger, r.Mode, strings.Join(parts, "; ")))
		}
	}
	if len(runs) == 0 {
		return ""
	}
	return "\nOperations by client:\n\n- " + strings.Join(runs, "\n- ") + "\n"
}

// podsBy is " (n on the RoundTripper, …)", or "" when the report does not
// say.
func podsBy(by map[string]int) string {
	names := map[string]string{clientstats.HTTP: "on retry.RoundTripper", clientstats.GRPC: "on runtime/grpc", clientstats.Sidecar: "through the sidecar"}
	var parts []string
	for _, c := range clientstats.Clients {
		if n := by[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, names[c]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
