package budget

import (
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
)

// MC-PO-01: retries are blocked when the balance is <= 0, not when it is
// below a whole token. Exactly 0 is refused; 0.1 buys a retry and leaves
// -0.9; nine deposits bring it back to exactly 0, still refused; the tenth
// allows the next.
func TestBalanceAtZeroIsTheBoundary(t *testing.T) {
	b := New(Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 1, Partitions: 1}, clock.NewFake(start))
	for range 1000 {
		b.Primary() // the ratio is not what this test is about
	}
	if d := b.TryRetry(); d != Allowed || b.Tokens() != 0 {
		t.Fatalf("the one token: %q, balance %v", d, b.Tokens())
	}
	if d := b.TryRetry(); d != NoTokens {
		t.Fatalf("a balance of exactly 0: %q, want %q", d, NoTokens)
	}
	b.Success()
	if d := b.TryRetry(); d != Allowed || b.Tokens() != -0.9 {
		t.Fatalf("a balance of 0.1: %q, balance after %v (want allowed, -0.9)", d, b.Tokens())
	}
	for range 9 {
		b.Success()
	}
	if d := b.TryRetry(); d != NoTokens || b.Tokens() != 0 {
		t.Fatalf("back at exactly 0: %q, balance %v", d, b.Tokens())
	}
	b.Success()
	if d := b.TryRetry(); d != Allowed {
		t.Fatalf("0.1 again: %q", d)
	}
}

// Retries granted by the floor are accounted: they withdraw tokens while
// the balance is above 0, and the floor bounds all of a second's retries
// rather than adding to those the ratio granted.
func TestTheFloorIsABoundNotAGift(t *testing.T) {
	clk := clock.NewFake(start)
	c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, MinRetriesPerSecond: 5, Partitions: 1}
	b := New(c, clk)
	clk.Advance(2 * time.Minute) // the start credit has left the window: no primaries at all
	granted := 0
	for b.TryRetry() == Allowed {
		granted++
	}
	if granted != 5 || b.Tokens() != 5 {
		t.Fatalf("with no primaries the floor grants 5 in a second, each paid: granted %d, balance %v", granted, b.Tokens())
	}
	clk.Advance(time.Second)
	for range 30 {
		b.Primary() // the ratio now allows 3 retries in the window
	}
	granted = 0
	for b.TryRetry() == Allowed {
		granted++
	}
	if granted != 5 {
		t.Fatalf("3 by the ratio and a floor of 5 make 5 in a second, not 8: granted %d", granted)
	}
}

// A new budget counts Credit primaries: a cold process retries its first
// failures, at most its full bucket, and the credit leaves with the window.
func TestAColdBudgetRetriesWithinItsBucket(t *testing.T) {
	clk := clock.NewFake(start)
	b := New(seed(), clk)
	granted := 0
	for b.TryRetry() == Allowed {
		granted++
	}
	if granted != 10 {
		t.Fatalf("a new budget of 10 tokens granted %d retries, want 10", granted)
	}
	fresh := New(seed(), clk)
	clk.Advance(time.Minute)
	if d := fresh.TryRetry(); d != RatioExceeded {
		t.Fatalf("a window later, with no traffic: %q, want %q", d, RatioExceeded)
	}
}

func TestCreditBuysExactlyTheBucket(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want int64
	}{
		{seed(), 100},
		{Config{RetryPercent: 3, MaxTokens: 10, Partitions: 1}, 334},                     // ceil(1000/3)
		{Config{RetryPercent: 10, MaxTokens: 10, Partitions: 3}, 30},                     // 3 tokens per pod
		{Config{RetryPercent: 10, MaxTokens: 10, Partitions: 20}, 0},                     // no token, no credit
		{Config{RetryPercent: 100, MaxTokens: 1, Partitions: 1, Window: time.Second}, 1}, //
	} {
		if got := credit(tc.c); got != tc.want {
			t.Errorf("Credit(%+v) = %d, want %d", tc.c, got, tc.want)
		}
	}
}
