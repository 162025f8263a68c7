package backoff

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// 10,000 draws per retry: within bounds, never zero, and uniform by a
// chi-square test over 20 equal bins (fixed seed, so the verdict is stable).
func TestFullJitterIsUniformWithinBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(2901, 1200))
	s := Strategy{Jitter: Full, Base: 100 * time.Millisecond, Cap: 3 * time.Second, Multiplier: 2, Rand: rng.Int64N}
	const draws, bins = 10_000, 20
	// 19 degrees of freedom: the 99.9th percentile of chi-square is 43.82.
	const critical = 43.82
	for retry := 1; retry <= 6; retry++ {
		window := Window(s.Base, s.Cap, s.Multiplier, retry)
		counts := make([]int, bins)
		for range draws {
			d := s.Delay(retry, 0)
			if d < Floor || d > window {
				t.Fatalf("retry %d: %v outside [%v, %v]", retry, d, Floor, window)
			}
			b := int(float64(d-Floor) / float64(window-Floor+1) * bins)
			counts[b]++
		}
		chi := 0.0
		expected := float64(draws) / bins
		for _, c := range counts {
			chi += (float64(c) - expected) * (float64(c) - expected) / expected
		}
		if chi > critical {
			t.Errorf("retry %d (window %v): chi-square %.1f > %.2f, counts %v", retry, window, chi, critical, counts)
		}
	}
}

func TestEqualAndDecorrelatedBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	eq := Strategy{Jitter: Equal, Base: 100 * time.Millisecond, Cap: 3 * time.Second, Multiplier: 2, Rand: rng.Int64N}
	dc := Strategy{Jitter: Decorrelated, Base: 100 * time.Millisecond, Cap: 3 * time.Second, Rand: rng.Int64N}
	prev := time.Duration(0)
	for i := range 10_000 {
		retry := i%5 + 1
		w := Window(eq.Base, eq.Cap, eq.Multiplier, retry)
		if d := eq.Delay(retry, 0); d < w/2 || d > w {
			t.Fatalf("Equal retry %d: %v outside [%v, %v]", retry, d, w/2, w)
		}
		d := dc.Delay(retry, prev)
		if d < dc.Base || d > dc.Cap || d > 3*max(prev, dc.Base) {
			t.Fatalf("Decorrelated after %v: %v", prev, d)
		}
		prev = d
	}
}

func TestNeverZero(t *testing.T) {
	zero := func(int64) int64 { return 0 }
	for _, j := range []Jitter{Full, Equal, Decorrelated} {
		s := Strategy{Jitter: j, Base: time.Nanosecond, Cap: time.Nanosecond, Multiplier: 1, Rand: zero}
		if d := s.Delay(1, 0); d < Floor {
			t.Errorf("%s drew %v", j, d)
		}
	}
	if d := (Strategy{Jitter: Full, Base: time.Second, Cap: time.Second, Multiplier: 2}).Delay(math.MaxInt32, 0); d > time.Second || d < Floor {
		t.Errorf("a huge retry number: %v", d)
	}
}
