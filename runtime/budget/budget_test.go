package budget

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

var start = time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)

func seed() Config {
	return Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, Partitions: 1}
}

// aged returns a new budget whose start credit has left the window: only
// the primaries a test counts are in it.
func aged(c Config, clk *clock.Fake) *Budget {
	b := New(c, clk)
	clk.Advance(max(c.Window, time.Second))
	return b
}

func TestTokenMathIsExact(t *testing.T) {
	clk := clock.NewFake(start)
	b := New(seed(), clk)
	if b.Tokens() != 10 {
		t.Fatalf("a new budget holds %v tokens, want 10", b.Tokens())
	}
	for range 100 {
		b.Primary() // enough primaries that the ratio allows 10 retries
	}
	for i := range 10 {
		if d := b.TryRetry(); d != Allowed {
			t.Fatalf("retry %d: %s", i, d)
		}
	}
	if b.Tokens() != 0 {
		t.Fatalf("after 10 retries: %v tokens", b.Tokens())
	}
	if d := b.TryRetry(); d != RatioExceeded && d != NoTokens {
		t.Fatalf("an 11th retry: %q", d)
	}
	for range 9 {
		b.Success()
	}
	if b.Tokens() != 0.9 {
		t.Fatalf("nine successes at 10%% deposit 0.9 exactly, got %v", b.Tokens())
	}
	b.Success()
	if b.Tokens() != 1 {
		t.Fatalf("ten successes buy one token, got %v", b.Tokens())
	}
	for range 1000 {
		b.Success()
	}
	if b.Tokens() != 10 {
		t.Fatalf("capacity is 10, got %v", b.Tokens())
	}
}

func TestRatioCapsRetriesEvenWithTokens(t *testing.T) {
	b := aged(seed(), clock.NewFake(start))
	for range 20 {
		b.Primary()
	}
	granted := 0
	for b.TryRetry() == Allowed {
		granted++
	}
	if granted != 2 {
		t.Fatalf("10%% of 20 primaries is 2 retries, granted %d", granted)
	}
}

// Every share rounds down: 3 pods with floor(5/3) = 1 each grant at most 3
// a second, never more than the 5 declared, and hold floor(10/3) = 3
// tokens each, so that 3 cold pods never hold more than maxTokens (on the
// old rule, rounded up, they held 4 each: 12 of 10).
func TestPartitionsSplitEveryShareDown(t *testing.T) {
	b := aged(Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, MinRetriesPerSecond: 5, Partitions: 3}, clock.NewFake(start))
	if b.Tokens() != 3 {
		t.Fatalf("10 tokens over 3 pods is floor(3.33) = 3, got %v", b.Tokens())
	}
	// No primaries at all: only the floor, floor(5/3) = 1 per second.
	granted := 0
	for b.TryRetry() == Allowed {
		granted++
	}
	if granted != 1 {
		t.Fatalf("floor of 5/s over 3 pods allows 1 per second, got %d", granted)
	}
}

// A clock that steps backwards mints nothing: no tokens (they are not
// time-based at all), no fresh floor second, no reopened window.
func TestBackwardClockMintsNothing(t *testing.T) {
	clk := clock.NewFake(start)
	b := aged(Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, MinRetriesPerSecond: 1, Partitions: 1}, clk)
	if b.TryRetry() != Allowed {
		t.Fatal("the floor's first retry")
	}
	if b.TryRetry() == Allowed {
		t.Fatal("a second floor retry in the same second")
	}
	tokens := b.Tokens()
	for _, step := range []time.Duration{-time.Hour, -time.Second, -time.Minute} {
		clk.Advance(step)
		if d := b.TryRetry(); d == Allowed {
			t.Fatalf("after stepping %v the floor allowed another retry", step)
		}
		if b.Tokens() != tokens {
			t.Fatalf("after stepping %v tokens changed %v → %v", step, tokens, b.Tokens())
		}
	}
	// Primaries recorded while the clock is behind still land in the
	// latest window and count, next to the floor retry already there:
	// 20 primaries allow a second retry at 10%, 19 would not.
	for range 19 {
		b.Primary()
	}
	if d := b.TryRetry(); d != RatioExceeded {
		t.Fatalf("19 primaries and 1 retry: %q, want ratio", d)
	}
	b.Primary()
	if d := b.TryRetry(); d != Allowed {
		t.Fatalf("20 primaries allow a second retry at 10%%: %q", d)
	}
}

// 10,000 simulated runs with random traffic on a fake clock. At every
// granted retry, retries in the window ending then are at most retryPercent%
// of max(the real primaries in it, the start credit while the window holds
// the start): never of their sum. (No limiter can promise it for windows
// ending later: the primaries that justified a retry age out before it
// does.)
func TestRatioHoldsAcrossSimulatedRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(2901, 45))
	for run := range 10_000 {
		clk := clock.NewFake(start)
		c := Config{RetryPercent: int32(1 + rng.IntN(20)), Window: time.Duration(1+rng.IntN(60)) * time.Second,
			MaxTokens: int32(1 + rng.IntN(50)), Partitions: 1}
		b := New(c, clk)
		var primaries, retries []time.Time
		failRate := rng.Float64()
		for range 300 {
			clk.Advance(time.Duration(rng.Int64N(int64(c.Window / 20))))
			now := clk.Now()
			b.Primary()
			primaries = append(primaries, now)
			if rng.Float64() >= failRate {
				b.Success()
				continue
			}
			for attempt := 0; attempt < 2 && b.TryRetry() == Allowed; attempt++ {
				retries = append(retries, now)
				inP, inR := count(primaries, now, c.Window), count(retries, now, c.Window)
				if now.Sub(start) < c.Window {
					inP = max(inP, int(credit(c)))
				}
				if inR*100 > int(c.RetryPercent)*inP {
					t.Fatalf("run %d (%+v): %d retries vs %d primaries in the window ending %v",
						run, c, inR, inP, now.Sub(start))
				}
				if rng.Float64() < 0.5 {
					b.Success()
					break
				}
			}
		}
	}
}

// count is how many of ts (in time order, none after now) fall in the window
// ending at now.
func count(ts []time.Time, now time.Time, window time.Duration) int {
	first := sort.Search(len(ts), func(i int) bool { return now.Sub(ts[i]) < window })
	return len(ts) - first
}

func TestConcurrentUseKeepsTokensInRange(t *testing.T) {
	b := New(seed(), clock.Real{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				b.Primary()
				if (i+g)%7 == 0 {
					b.TryRetry()
				} else {
					b.Success()
				}
			}
		})
	}
	wg.Wait()
	if tok := b.Tokens(); tok <= -1 || tok > 10 {
		t.Fatalf("tokens %v outside (-1, 10]", tok)
	}
}

func payload(name string, generation int64, maxTokens int32) *policyconfig.Budget {
	return &policyconfig.Budget{Name: name, Generation: generation, RetryPercent: 10,
		Window: policyconfig.Duration(time.Minute), MaxTokens: maxTokens, Partitions: 1}
}

func TestRegistrySharesAndUpdates(t *testing.T) {
	r := NewRegistry(clock.NewFake(start))
	a, err := r.Resolve("auth", payload("telephony", 1, 10))
	if err != nil || a.Tokens() != 10 {
		t.Fatalf("a new budget: %v, %v tokens", err, a.Tokens())
	}
	if b, _ := r.Resolve("auth", payload("telephony", 1, 10)); b != a {
		t.Fatal("one budget per namespace/name")
	}
	if b, err := r.Resolve("auth", payload("telephony", 2, 4)); b != a || err != nil || a.Tokens() != 4 {
		t.Fatalf("a newer generation updates and clamps the tokens: %v, %v", err, a.Tokens())
	}
	if b, _ := r.Resolve("other", payload("telephony", 1, 10)); b == a {
		t.Fatal("namespaces do not share budgets")
	}
	if r.Conflicts() != 0 {
		t.Fatalf("%d conflicts", r.Conflicts())
	}
}

// A payload cannot rewrite another policy's budget: figures of an older
// generation, or other figures under the same generation, are not applied;
// each is reported, logged and counted.
func TestRegistryKeepsTheNewestGenerationsFigures(t *testing.T) {
	var logged bytes.Buffer
	r := NewRegistry(clock.NewFake(start), WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	a, _ := r.Resolve("auth", payload("telephony", 3, 10))
	for i, offered := range []*policyconfig.Budget{payload("telephony", 3, 1), payload("telephony", 2, 1)} {
		b, err := r.Resolve("auth", offered)
		var c *Conflict
		if b != a || !errors.As(err, &c) || c.Generation != offered.Generation || c.KeptGeneration != 3 || c.Kept.MaxTokens != 10 {
			t.Fatalf("offer %d: %v", i, err)
		}
		if a.Tokens() != 10 {
			t.Fatalf("offer %d took the first policy's tokens to %v", i, a.Tokens())
		}
	}
	if _, err := r.Resolve("auth", payload("telephony", 2, 10)); err != nil {
		t.Fatalf("an older generation with the same figures is no conflict: %v", err)
	}
	if r.Conflicts() != 2 || strings.Count(logged.String(), "retry budget figures not applied") != 2 {
		t.Fatalf("%d conflicts counted, log: %s", r.Conflicts(), logged.String())
	}
}

func TestConfigOfCarriesEveryFigure(t *testing.T) {
	limit := int32(0)
	b := &policyconfig.Budget{Name: "x", Generation: 1, RetryPercent: 7, Window: policyconfig.Duration(90 * time.Second),
		MaxTokens: 12, MinRetriesPerSecond: 3, Partitions: 4, MaxRetriesPerSecond: &limit,
		Consumers: &policyconfig.Consumers{Count: 9, ObservedAt: start, Members: policyconfig.EncodeMembers([]string{"uid-a", "uid-b"})}}
	want := Config{RetryPercent: 7, Window: 90 * time.Second, MaxTokens: 12, MinRetriesPerSecond: 3, Partitions: 4,
		MaxRetriesPerSecond: new(int32(0)), Counted: true, Consumers: &policyconfig.Consumers{Count: 9, ObservedAt: start}, Included: true}
	if got := ConfigOf(b, "uid-b"); !equal(got, want) {
		t.Fatalf("ConfigOf = %+v, want %+v", got, want)
	}
	want.Included = false
	for _, pod := range []string{"uid-c", ""} {
		if got := ConfigOf(b, pod); !equal(got, want) {
			t.Fatalf("ConfigOf for a pod the count does not name (%q) = %+v, want %+v", pod, got, want)
		}
	}
	b.MaxRetriesPerSecond, b.Consumers = nil, nil
	want.MaxRetriesPerSecond, want.Counted, want.Consumers = nil, false, nil
	if got := ConfigOf(b, "uid-a"); !equal(got, want) {
		t.Fatalf("without an allowance or a count, ConfigOf = %+v, want %+v", got, want)
	}
}

// A pod's share of the absolute figures is what the budget itself holds:
// divided over the partitions, every figure rounded down, a missing
// partition count taken as one.
func TestShareOverIsWhatTheBudgetHolds(t *testing.T) {
	for _, tc := range []struct {
		tokens, floor, parts  int32
		wantTokens, wantFloor int64
	}{
		{10, 5, 1, 10, 5},
		{10, 5, 4, 2, 1},
		{10, 0, 3, 3, 0},
		{1, 1, 20, 0, 0},
		{10, 5, 0, 10, 5},
	} {
		c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: tc.tokens, MinRetriesPerSecond: tc.floor, Partitions: tc.parts}
		sh := ShareOver(c, Denominator(c, start))
		if sh.Tokens != tc.wantTokens || sh.MinRetriesPerSecond != tc.wantFloor {
			t.Errorf("%+v: share %d tokens, floor %d; want %d, %d", c, sh.Tokens, sh.MinRetriesPerSecond, tc.wantTokens, tc.wantFloor)
		}
		if got := New(c, clock.NewFake(start)).Tokens(); int64(got) != sh.Tokens {
			t.Errorf("%+v: a new budget holds %v tokens, its share says %d", c, got, sh.Tokens)
		}
	}
}
