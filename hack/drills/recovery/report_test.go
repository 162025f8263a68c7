package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRecoveryLagIsWhenEveryLaterWindowHoldsFewerThanTwo(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	fault := 45 * time.Second
	for _, c := range []struct {
		retries []int
		want    time.Duration
	}{
		{nil, 0},
		{[]int{45100}, 0}, // one retry is under 2/s
		{[]int{45000, 45300, 45600, 47000, 48700}, 300 * time.Millisecond}, // the last pair within 1 s starts at 45.3
		{[]int{45000, 46900, 47800}, 1900 * time.Millisecond},
		{[]int{45000, 46000, 47001}, 0}, // a full second apart: never two in one window
	} {
		if got := recoveryLag(ms(c.retries...), fault); got != c.want {
			t.Errorf("%v: lag %v, want %v", c.retries, got, c.want)
		}
	}
}

func TestJudgeNamesEveryBreach(t *testing.T) {
	s := summary{Offered: 10, Dispatched: 9, DeadLettered: 0, Lost: 1, Bans: 1, RetryBans: 1, FirstBanSeconds: 3.2,
		PeakWindow: 1400, PeakRetryWindow: 200, MaxBucketRatio: 1.5, MaxRatioSecond: 4, RecoverySeconds: 3}
	v := judge(s, 1320, 120)
	if v.Pass || len(v.Failures) != 4 {
		t.Fatalf("%+v", v)
	}
	for i, want := range []string{"ban", "3.0 s", "1.50", "lost"} {
		if !strings.Contains(v.Failures[i], want) {
			t.Errorf("failure %d %q does not mention %q", i, v.Failures[i], want)
		}
	}
	if v := judge(summary{Offered: 10, Dispatched: 10, MaxBucketRatio: 1.1, RecoverySeconds: 2.5}, 1320, 120); !v.Pass {
		t.Fatalf("at the limits: %+v", v)
	}
}

// A ban the retries did not cause (a burst of primaries from a late load
// generator) is reported, but it is not the policy's failure.
func TestJudgeWarnsOfABanThePrimariesCaused(t *testing.T) {
	s := summary{Offered: 10, Dispatched: 10, Bans: 1, FirstBanSeconds: 3.1, PeakWindow: 1324, PeakRetryWindow: 60,
		MaxBucketRatio: 1.04}
	v := judge(s, 1320, 120)
	if !v.Pass || len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "1324") {
		t.Fatalf("%+v", v)
	}
}

func TestOffScheduleNamesTheWorstSecond(t *testing.T) {
	on := []int{900, 1200, 1190, 1210, 1200, 300}
	if r := offSchedule([][]int{on}, 1200, 5, 20); r != "" {
		t.Fatalf("on schedule: %q", r)
	}
	if r := offSchedule([][]int{on}, 1200, 5, 150); !strings.Contains(r, "150 ms") {
		t.Fatalf("late arrivals: %q", r)
	}
	off := []int{900, 1200, 0, 2400, 1200, 300}
	if r := offSchedule([][]int{on, off}, 1200, 5, 20); !strings.Contains(r, "second 2") {
		t.Fatalf("a stalled second: %q", r)
	}
}

// Only the breaches a busy machine can cause (a ban, a slow recovery) make a
// run inconclusive; a lost operation or a retry ratio over 10% never does.
func TestTimingOnlyFailures(t *testing.T) {
	timed := judge(summary{Offered: 1, Dispatched: 1, RecoverySeconds: 4}, 1320, 120)
	exact := judge(summary{Offered: 1, Lost: 1, RecoverySeconds: 4}, 1320, 120)
	if !timed.TimingOnly || exact.TimingOnly {
		t.Fatalf("timed %+v, exact %+v", timed, exact)
	}
}

// report.json keeps each per-second series on one line, and reads back as
// the report written.
func TestReportKeepsEachSeriesOnOneLine(t *testing.T) {
	rep := &report{Options: []optionReport{{Name: "C", Series: series{Primary: []int{1200, 1201}, Outbound: []int{1247, 1245},
		BudgetTokens: []float64{12.5, -0.4}}}}}
	data, err := encodeReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{`"primary": [1200,1201],`, `"outbound": [1247,1245],`, `"budgetTokens": [12.5,-0.4]`} {
		if !bytes.Contains(data, []byte(line)) {
			t.Errorf("no line %s in\n%s", line, data)
		}
	}
	var back report
	if err := json.Unmarshal(data, &back); err != nil || back.Options[0].Series.BudgetTokens[1] != -0.4 || back.Options[0].Series.Outbound[1] != 1245 {
		t.Fatalf("%v: %+v", err, back)
	}
}
