package budget

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
)

// Primary on the real clock reads the monotonic clock alone; its primaries
// land in the window TryRetry judges on the wall clock: 200 primaries allow
// exactly 20 retries at 10% (the floor pays for them past the one token).
func TestPrimariesOnTheRealClockCountInTheWindow(t *testing.T) {
	b := New(Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 1, MinRetriesPerSecond: 1000, Partitions: 1}, clock.Real{})
	for range 200 {
		b.Primary()
	}
	granted := 0
	d := b.TryRetry()
	for ; d == Allowed; d = b.TryRetry() {
		granted++
	}
	if granted != 20 || d != RatioExceeded {
		t.Fatalf("200 primaries: %d retries granted, then %q; want 20, then %q", granted, d, RatioExceeded)
	}
}

// TryRetry sums the window's closed buckets once a bucket; at every
// decision those sums and the open bucket are what a count of every bucket
// in the window gives.
func TestTheWindowSumsAreAFullCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 4))
	clk := clock.NewFake(start)
	b := New(Config{RetryPercent: 20, Window: 10 * time.Second, MaxTokens: 5, MinRetriesPerSecond: 2, Partitions: 1}, clk)
	for range 20_000 {
		clk.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		if rng.IntN(3) == 0 {
			clk.Advance(-time.Duration(rng.Int64N(int64(time.Second)))) // the clock steps back now and then
		}
		for range rng.IntN(4) {
			b.Primary()
		}
		b.TryRetry()
		b.mu.Lock()
		primaries, retries := b.fullCount()
		got, gotR := b.olderPrimaries, b.olderRetries
		e, n := b.olderEpoch, int64(len(b.primaries))
		if bk := &b.primaries[e%n]; bk.epoch.Load() == e {
			got += bk.primaries.Load()
		}
		if b.retryEpochs[e%n] == e {
			gotR += b.retries[e%n]
		}
		b.mu.Unlock()
		if got != primaries || gotR != retries {
			t.Fatalf("at %v: sums of %d primaries and %d retries, a full count %d and %d", clk.Now().Sub(start), got, gotR, primaries, retries)
		}
	}
}

// fullCount counts the window ending in the latest bucket: the primaries of
// the buckets wholly inside it, the retries of those and the one the far
// edge cuts. The caller holds mu.
func (b *Budget) fullCount() (primaries, retries int64) {
	e, n := b.high.Load(), int64(len(b.primaries))
	for i := int64(0); i < n && e-i >= 0; i++ {
		ep := e - i
		if i < bucketsPerWindow && b.primaries[ep%n].epoch.Load() == ep {
			primaries += b.primaries[ep%n].primaries.Load()
		}
		if b.retryEpochs[ep%n] == ep {
			retries += b.retries[ep%n]
		}
	}
	return primaries, retries
}
