package backoff

import (
	"math"
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	ms := time.Millisecond
	for name, tc := range map[string]struct {
		base, cap time.Duration
		mult      int32
		retry     int
		want      time.Duration
	}{
		"seed: before attempt 2":    {100 * ms, 3 * time.Second, 2, 1, 200 * ms},
		"seed: before attempt 3":    {100 * ms, 3 * time.Second, 2, 2, 400 * ms},
		"capped":                    {100 * ms, 3 * time.Second, 2, 6, 3 * time.Second},
		"retry 0 is the base":       {100 * ms, 3 * time.Second, 2, 0, 100 * ms},
		"multiplier 1 is constant":  {250 * ms, time.Second, 1, 9, 250 * ms},
		"huge retry saturates":      {time.Nanosecond, time.Duration(math.MaxInt64), 10, 1000, time.Duration(math.MaxInt64)},
		"zero base":                 {0, time.Second, 2, 3, 0},
		"multiplier 0 acts as 1":    {100 * ms, time.Second, 0, 3, 100 * ms},
		"cap below base is the cap": {2 * time.Second, time.Second, 2, 1, time.Second},
	} {
		if got := Window(tc.base, tc.cap, tc.mult, tc.retry); got != tc.want {
			t.Errorf("%s: Window = %v, want %v", name, got, tc.want)
		}
	}
}

func TestDecorrelatedMax(t *testing.T) {
	if got := DecorrelatedMax(100*time.Millisecond, 3*time.Second, 2); got != 900*time.Millisecond {
		t.Fatalf("DecorrelatedMax = %v, want 900ms", got)
	}
}
