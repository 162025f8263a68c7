package main

import (
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
	s := summary{Offered: 10, Dispatched: 9, DeadLettered: 0, Lost: 1, Bans: 1, FirstBanSeconds: 3.2, PeakWindow: 1400,
		MaxBucketRatio: 1.5, MaxRatioSecond: 4, RecoverySeconds: 3}
	v := judge(s, 1320)
	if v.Pass || len(v.Failures) != 4 {
		t.Fatalf("%+v", v)
	}
	for i, want := range []string{"ban", "1.50", "3.0 s", "lost"} {
		if !strings.Contains(v.Failures[i], want) {
			t.Errorf("failure %d %q does not mention %q", i, v.Failures[i], want)
		}
	}
	if v := judge(summary{Offered: 10, Dispatched: 10, MaxBucketRatio: 1.1, RecoverySeconds: 2.5}, 1320); !v.Pass {
		t.Fatalf("at the limits: %+v", v)
	}
}
