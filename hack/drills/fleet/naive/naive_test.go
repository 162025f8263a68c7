package naive

import (
	"context"
	"testing"
	"time"
)

// TestTwentySevenAttemptsAtTheBottom: the layers multiply, 3 × 3 × 3, and
// each delay is its layer's, fixed.
func TestTwentySevenAttemptsAtTheBottom(t *testing.T) {
	if got := MaxAttempts(); got != 27 {
		t.Fatalf("MaxAttempts: %d, want 27", got)
	}
	var total time.Duration
	counts := map[time.Duration]int{}
	for n := 0; ; n++ {
		d, ok := DelayAfter(n)
		if !ok {
			if n != 26 {
				t.Fatalf("no attempt left after attempt %d, want after the 27th (26)", n)
			}
			break
		}
		counts[d]++
		total += d
	}
	// 18 connector retries, 6 job retries, 2 workflow retries.
	want := map[time.Duration]int{100 * time.Millisecond: 18, 500 * time.Millisecond: 6, time.Second: 2}
	for d, n := range want {
		if counts[d] != n {
			t.Errorf("delay %v: %d times, want %d (%v)", d, counts[d], n, counts)
		}
	}
	if total != 6800*time.Millisecond {
		t.Errorf("the delays add up to %v, want 6.8s", total)
	}
}

func TestDoStopsAtSuccess(t *testing.T) {
	calls := 0
	n, ok := Do(context.Background(), func(context.Context) bool { calls++; return calls == 2 })
	if n != 2 || !ok || calls != 2 {
		t.Errorf("Do: %d attempts ok=%v calls=%d, want 2 true 2", n, ok, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, ok := Do(ctx, func(context.Context) bool { return false }); n != 1 || ok {
		t.Errorf("Do with ctx done: %d %v, want 1 false", n, ok)
	}
}
