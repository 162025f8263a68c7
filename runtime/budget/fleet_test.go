package budget

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// fleet is a fleet budget of A retries per second with plenty of tokens,
// no floor and a generous ratio, so that only the per-second share decides.
func fleet(perSecond, partitions int32, counted bool, n int32, observedAt time.Time) Config {
	return Config{RetryPercent: 100, Window: time.Minute, MaxTokens: 100_000, Partitions: partitions,
		MaxRetriesPerSecond: perSecond, LimitRetriesPerSecond: true,
		Consumers: Consumers{Counted: counted, N: n, ObservedAt: observedAt}}
}

// busy returns a budget on clk whose window holds enough primaries that the
// ratio never refuses.
func busy(c Config, clk *clock.Fake, opts ...Option) *Budget {
	b := New(c, clk, opts...)
	for range 100_000 {
		b.Primary()
	}
	return b
}

// grants asks for retries until one is refused, and returns how many were
// granted and why the next was refused.
func grants(b *Budget) (int, Denial) {
	for n := 0; n < 1_000_000; n++ {
		if d := b.TryRetry(); d != Allowed {
			return n, d
		}
	}
	return -1, Allowed
}

// perSecond moves clk to the next whole second secs times and returns the
// retries granted in each, counting enough primaries first that the ratio
// never refuses.
func perSecond(b *Budget, clk *clock.Fake, secs int) []int {
	out := make([]int, secs)
	for i := range out {
		clk.Set(clk.Now().Truncate(time.Second).Add(time.Second))
		for range 1000 {
			b.Primary()
		}
		out[i], _ = grants(b)
	}
	return out
}

func all(got []int, want int) bool {
	for _, g := range got {
		if g != want {
			return false
		}
	}
	return true
}

// A fresh count that covers the pod: D = max(N, 1), for the per-second
// allowance, the tokens and the floor alike.
func TestAFreshCoveringCountDividesByN(t *testing.T) {
	clk := clock.NewFake(start)
	b := busy(fleet(20, 20, true, 4, start.Add(2*time.Second)), clk)
	if got := perSecond(b, clk, 5); !all(got, 5) {
		t.Fatalf("20/s over 4 counted pods is 5 a second, got %v", got)
	}
	c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, MinRetriesPerSecond: 5, Partitions: 20,
		Consumers: Consumers{Counted: true, N: 4, ObservedAt: start.Add(2 * time.Second)}}
	clk = clock.NewFake(start.Add(3 * time.Second))
	b = New(c, clk, StartedAt(start))
	if b.Tokens() != 3 {
		t.Fatalf("10 tokens over 4 pods is ceil(2.5) = 3, got %v", b.Tokens())
	}
	clk.Advance(2 * time.Minute) // the start credit has left the window: only the floor grants
	c.Consumers.ObservedAt = clk.Now()
	b.Update(c)
	if n, _ := grants(b); n != 1 {
		t.Fatalf("a floor of 5/s over 4 pods is floor(1.25) = 1 a second, got %d", n)
	}
	if got, want := ShareOver(c, 4), (Share{Tokens: 3, MinRetriesPerSecond: 1}); got != want {
		t.Fatalf("ShareOver(4) = %+v, want %+v: what the budget holds", got, want)
	}
	if got, want := ShareOver(fleet(20, 20, true, 4, start), 3), (Share{Tokens: 33_334, MilliRetriesPerSecond: 6000, Limited: true}); got != want {
		t.Fatalf("ShareOver(3) = %+v, want %+v", got, want)
	}
	if got := ShareOver(c, ZeroShare); got != (Share{}) {
		t.Fatalf("a zero share holds %+v", got)
	}
	// A fresh count of 0 while this pod draws on the budget: the selector
	// misses the pod, so the count says nothing; the conservative share.
	if d := Denominator(fleet(20, 20, true, 0, start.Add(2*time.Second)), start, start.Add(3*time.Second)); d != 20 {
		t.Fatalf("a covering count of 0 divides by partitions = 20, got %d", d)
	}
}

// A fresh count that does not cover the pod (taken before it started): no
// retry until observedAt + ConsumerCountStaleAfter, then the stale share
// A/max(P, N); and the bucket the pod could not hold is given then.
func TestACountThatMissedThePodGivesItNothingUntilStale(t *testing.T) {
	observed := start.Add(-10 * time.Second)
	c := fleet(20, 20, true, 4, observed)
	c.MaxTokens, c.MinRetriesPerSecond = 40, 20
	clk := clock.NewFake(start)
	b := busy(c, clk)
	if b.Tokens() != 0 {
		t.Fatalf("a pod with a zero share holds no tokens, got %v", b.Tokens())
	}
	for clk.Now().Before(observed.Add(policyconfig.ConsumerCountStaleAfter)) {
		if n, d := grants(b); n != 0 || d != NoShare {
			t.Fatalf("at %v, with a count that missed the pod: %d granted (%q), want none", clk.Now().Sub(start), n, d)
		}
		clk.Advance(500 * time.Millisecond)
	}
	clk.Set(observed.Add(policyconfig.ConsumerCountStaleAfter)) // still fresh at exactly the bound
	if d := b.TryRetry(); d != NoShare {
		t.Fatalf("at exactly observedAt+StaleAfter: %q, want %q", d, NoShare)
	}
	clk.Advance(time.Nanosecond)
	if d := b.TryRetry(); d != RateExceeded || b.Tokens() != 2 {
		t.Fatalf("stale: %q with %v tokens; want no rate credit before the next second, and ceil(40/20) = 2 tokens", d, b.Tokens())
	}
	if got := perSecond(b, clk, 3); !all(got, 1) {
		t.Fatalf("stale: 20/s over max(P=20, N=4) is 1 a second, got %v", got)
	}
}

// A covering count that arrives ends the zero share at once.
func TestACoveringCountEndsTheZeroShare(t *testing.T) {
	clk := clock.NewFake(start)
	b := busy(fleet(20, 20, true, 4, start.Add(-time.Second)), clk)
	clk.Advance(5 * time.Second)
	if d := b.TryRetry(); d != NoShare {
		t.Fatalf("before the covering count: %q", d)
	}
	b.Update(fleet(20, 20, true, 5, clk.Now()))
	if got := perSecond(b, clk, 3); !all(got, 4) {
		t.Fatalf("20/s over 5 counted pods is 4 a second, got %v", got)
	}
}

// A stale count (the controller down): A/max(P, N), which is never more than
// what a fresh count gave, reached by the pod with no new payload.
func TestAStaleCountFallsBackToTheLargerOfPartitionsAndCount(t *testing.T) {
	for _, tc := range []struct {
		partitions, n int32
		fresh, stale  int
	}{
		{partitions: 20, n: 4, fresh: 5, stale: 1},  // max(20, 4) = 20
		{partitions: 2, n: 10, fresh: 2, stale: 2},  // max(2, 10) = 10
		{partitions: 10, n: 10, fresh: 2, stale: 2}, // nothing changes
	} {
		clk := clock.NewFake(start)
		observed := start.Add(2 * time.Second)
		b := busy(fleet(20, tc.partitions, true, tc.n, observed), clk)
		if got := perSecond(b, clk, 3); !all(got, tc.fresh) {
			t.Errorf("P=%d N=%d fresh: %v a second, want %d", tc.partitions, tc.n, got, tc.fresh)
		}
		clk.Set(observed.Add(policyconfig.ConsumerCountStaleAfter))
		if got := perSecond(b, clk, 3); !all(got, tc.stale) {
			t.Errorf("P=%d N=%d stale: %v a second, want %d", tc.partitions, tc.n, got, tc.stale)
		}
	}
}

// Without a count (the budget selects no consumers) the figures divide over
// the partitions, as they always have; the count's time does not matter.
func TestNoCountDividesByPartitions(t *testing.T) {
	clk := clock.NewFake(start)
	b := busy(fleet(20, 4, false, 0, time.Time{}), clk)
	if got := perSecond(b, clk, 3); !all(got, 5) {
		t.Fatalf("20/s over 4 partitions is 5 a second, got %v", got)
	}
	if d := Denominator(Config{Partitions: 0}, start, start); d != 1 {
		t.Fatalf("a missing partition count is one, got %d", d)
	}
}

// maxRetriesPerSecond 0 allows no retry, whatever the tokens, the ratio and
// the floor say.
func TestZeroRetriesPerSecondNeverRetries(t *testing.T) {
	c := fleet(0, 1, false, 0, time.Time{})
	c.MinRetriesPerSecond = 5
	clk := clock.NewFake(start)
	b := busy(c, clk)
	for i := range 10 {
		if n, d := grants(b); n != 0 || d != RateExceeded {
			t.Fatalf("second %d: %d granted (%q)", i, n, d)
		}
		clk.Advance(700 * time.Millisecond)
	}
	if b.Tokens() != 100_000 {
		t.Fatalf("refused retries spent tokens: %v", b.Tokens())
	}
}

// The floor grants retries whatever the ratio and the tokens, but never past
// maxRetriesPerSecond.
func TestTheFloorNeverPassesTheCap(t *testing.T) {
	c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 1, MinRetriesPerSecond: 20, Partitions: 2,
		MaxRetriesPerSecond: 10, LimitRetriesPerSecond: true}
	clk := clock.NewFake(start)
	b := New(c, clk)
	clk.Advance(2 * time.Minute) // no primaries, no start credit: only the floor would grant
	if got := perSecond(b, clk, 4); !all(got, 5) {
		t.Fatalf("a floor of 10/pod under a cap of 5/pod grants 5 a second, got %v", got)
	}
	if _, d := grants(b); d != RateExceeded {
		t.Fatalf("past the cap: %q, want %q", d, RateExceeded)
	}
}

// The per-second share is rounded down to whole retries and never saved
// up: a whole A/D is exact every second; a fraction is lost, never
// exceeded; below one retry a second a pod does not retry under the cap at
// all, since D pods each granting one would make D > A in that second.
func TestThePerSecondShareRounding(t *testing.T) {
	observed := start.Add(2 * time.Second)
	clk := clock.NewFake(start)
	b := busy(fleet(20, 20, true, 3, observed), clk)
	if got := perSecond(b, clk, 5); !all(got, 6) {
		t.Fatalf("20/s over 3 pods (6.67) grants 6 a second, got %v", got)
	}
	clk = clock.NewFake(start)
	b = busy(fleet(20, 20, true, 30, observed), clk)
	if got := perSecond(b, clk, 30); !all(got, 0) {
		t.Fatalf("20/s over 30 pods: below one retry a second, a pod grants none, got %v", got)
	}
	if _, d := grants(b); d != RateExceeded {
		t.Fatalf("below one retry a second: %q, want %q", d, RateExceeded)
	}
	// Credit saved over quiet seconds buys no burst.
	clk = clock.NewFake(start)
	b = busy(fleet(20, 20, true, 4, observed), clk)
	clk.Advance(time.Hour)
	b.Update(fleet(20, 20, true, 4, clk.Now().Add(-time.Second)))
	if got := perSecond(b, clk, 1); got[0] != 5 {
		t.Fatalf("after an idle hour, %d granted in a second, want 5", got[0])
	}
}

// A count is trusted to include this process only when taken at least
// ConsumerCountClockSkew after the process started, so a controller clock
// up to that far ahead cannot date a count that missed the pod after its
// start. A count dated further in the future is treated as stale.
func TestClockSkewAllowance(t *testing.T) {
	c := fleet(20, 20, true, 4, time.Time{})
	for _, tc := range []struct {
		observed time.Duration // after the process started
		now      time.Duration
		want     int64
	}{
		{observed: policyconfig.ConsumerCountClockSkew - time.Millisecond, now: 10 * time.Second, want: ZeroShare},
		{observed: policyconfig.ConsumerCountClockSkew, now: 10 * time.Second, want: 4},
		{observed: 10*time.Second + policyconfig.ConsumerCountClockSkew, now: 10 * time.Second, want: 4},                     // a little ahead: fresh
		{observed: 10*time.Second + policyconfig.ConsumerCountClockSkew + time.Millisecond, now: 10 * time.Second, want: 20}, // far ahead: stale
	} {
		c.Consumers.ObservedAt = start.Add(tc.observed)
		if d := Denominator(c, start, start.Add(tc.now)); d != tc.want {
			t.Errorf("count at start+%v, judged at start+%v: D = %d, want %d", tc.observed, tc.now, d, tc.want)
		}
	}
}

// A shrinking share clamps the tokens at once; a growing one keeps them.
func TestACountChangeClampsTheTokens(t *testing.T) {
	clk := clock.NewFake(start.Add(5 * time.Second))
	c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, Partitions: 20,
		Consumers: Consumers{Counted: true, N: 2, ObservedAt: start.Add(2 * time.Second)}}
	b := New(c, clk, StartedAt(start))
	if b.Tokens() != 5 {
		t.Fatalf("10 tokens over 2 pods: %v", b.Tokens())
	}
	c.Consumers = Consumers{Counted: true, N: 10, ObservedAt: start.Add(4 * time.Second)}
	b.Update(c)
	if b.Tokens() != 1 {
		t.Fatalf("10 tokens over 10 pods clamps the balance to 1, got %v", b.Tokens())
	}
	c.Consumers = Consumers{Counted: true, N: 1, ObservedAt: start.Add(5 * time.Second)}
	b.Update(c)
	if b.Tokens() != 1 {
		t.Fatalf("a larger share mints no tokens: %v", b.Tokens())
	}
}

func counted(generation int64, n int32, observedAt time.Time) *policyconfig.Budget {
	limit := int32(20)
	b := payload("shared", generation, 10_000)
	b.Partitions, b.MaxRetriesPerSecond = 20, &limit
	b.Consumers = &policyconfig.Consumers{Count: n, ObservedAt: observedAt}
	return b
}

// Payloads of different policies carry counts taken at different times and
// may arrive in any order: the newest count wins, an older one never
// replaces it, and neither is a conflict.
func TestOutOfOrderCounts(t *testing.T) {
	clk := clock.NewFake(start.Add(30 * time.Second))
	r := NewRegistry(clk, WithStart(start), WithLogger(slog.New(slog.DiscardHandler)))
	t10, t20, t25 := start.Add(10*time.Second), start.Add(20*time.Second), start.Add(25*time.Second)
	b, err := r.Resolve("shop", counted(1, 4, t20))
	if err != nil || Denominator(r.budgets["shop/shared"].config, start, clk.Now()) != 4 {
		t.Fatalf("first payload: %v", err)
	}
	steps := []struct {
		what    string
		payload *policyconfig.Budget
		want    int32
	}{
		{"an older count, same generation", counted(1, 2, t10), 4},
		{"a newer count, same generation", counted(1, 5, t25), 5},
		{"a newer generation with an older count keeps the newer count", counted(2, 2, t10), 5},
		{"an older generation's newer count is not applied", counted(1, 1, start.Add(29*time.Second)), 5},
	}
	for _, s := range steps {
		got, err := r.Resolve("shop", s.payload)
		if got != b || err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if e := r.budgets["shop/shared"]; e.config.Consumers.N != s.want {
			t.Fatalf("%s: the budget holds a count of %d, want %d", s.what, e.config.Consumers.N, s.want)
		}
	}
	if r.Conflicts() != 0 {
		t.Fatalf("counts caused %d conflicts", r.Conflicts())
	}
	if got := perSecond(b, clk, 2); !all(got, 4) {
		t.Fatalf("20/s over the newest count of 5 is 4 a second, got %v", got)
	}
	// The same generation without a count changes nothing; a newer
	// generation without one (the budget no longer selects consumers)
	// drops it, back to the partitions.
	noCount := counted(2, 0, time.Time{})
	noCount.Consumers = nil
	if _, err := r.Resolve("shop", noCount); err != nil || !r.budgets["shop/shared"].config.Consumers.Counted {
		t.Fatalf("a same-generation payload without a count: %v", err)
	}
	noCount.Generation = 3
	if _, err := r.Resolve("shop", noCount); err != nil || r.budgets["shop/shared"].config.Consumers.Counted {
		t.Fatalf("a newer generation without a count: %v", err)
	}
	// Other figures under the same generation are still a conflict.
	other := counted(3, 4, t25)
	other.RetryPercent = 50
	if _, err := r.Resolve("shop", other); !errors.As(err, new(*Conflict)) {
		t.Fatalf("other figures, same generation: %v", err)
	}
}

// A count dated far in the future (a controller clock far ahead) is held
// as stale, and the next true count replaces it.
func TestACountFromTheFutureIsHeldAsStale(t *testing.T) {
	clk := clock.NewFake(start.Add(time.Minute))
	r := NewRegistry(clk, WithStart(start))
	b, _ := r.Resolve("shop", counted(1, 4, clk.Now().Add(time.Hour)))
	if got := perSecond(b, clk, 2); !all(got, 1) {
		t.Fatalf("a count an hour ahead: %v a second, want 20/s over max(P=20, N=4) = 1", got)
	}
	if _, err := r.Resolve("shop", counted(1, 4, clk.Now())); err != nil {
		t.Fatal(err)
	}
	if got := perSecond(b, clk, 2); !all(got, 5) {
		t.Fatalf("after a true count: %v a second, want 20/s over 4 = 5", got)
	}
}

// The registry's start is the process's: a registry created after a count
// was taken is not covered by it.
func TestTheRegistryStartsAtItsCreation(t *testing.T) {
	clk := clock.NewFake(start)
	r := NewRegistry(clk)
	b, _ := r.Resolve("shop", counted(1, 4, start.Add(-time.Minute+time.Second)))
	if d := b.TryRetry(); d != NoShare {
		t.Fatalf("a count from before the registry's creation: %q, want %q", d, NoShare)
	}
	r = NewRegistry(clk, WithStart(start.Add(-2*time.Minute)))
	b, _ = r.Resolve("shop", counted(1, 4, start.Add(-time.Minute+time.Second)))
	if d := Denominator(b.params.Load().config, b.start, clk.Now()); d != 4 {
		t.Fatalf("with an injected earlier start the count covers: D = %d", d)
	}
}

// Concurrent retries while counts change: no second grants more than the
// largest share allows, and the tokens stay in range. Run with -race.
func TestConcurrentRetriesWithCountUpdates(t *testing.T) {
	clk := clock.NewFake(start)
	r := NewRegistry(clk, WithStart(start.Add(-time.Hour)))
	b, _ := r.Resolve("shop", counted(1, 4, start))
	for range 10_000 {
		b.Primary()
	}
	for sec := range 20 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted := 0
		for g := range 4 {
			wg.Go(func() {
				for i := range 200 {
					if g == 0 && i%20 == 0 {
						_, _ = r.Resolve("shop", counted(1, int32(2+(sec+i)%5), start.Add(time.Duration(sec*1000+i)*time.Millisecond)))
					}
					b.Primary()
					if b.TryRetry() == Allowed {
						mu.Lock()
						granted++
						mu.Unlock()
					} else {
						b.Success()
					}
				}
			})
		}
		wg.Wait()
		if granted > 10 { // 20/s over the smallest count, 2
			t.Fatalf("second %d granted %d", sec, granted)
		}
		if tok := b.Tokens(); tok <= -1 || tok > 10_000/2 {
			t.Fatalf("tokens %v outside (-1, 5000]", tok)
		}
		clk.Advance(time.Second)
	}
}

// FuzzShare: whatever a payload and the clocks say, the share computation
// never panics, D is never negative, and a counted budget never gives a pod
// more than A/max(N, 1) of any absolute figure.
func FuzzShare(f *testing.F) {
	f.Add(int32(20), int32(20), true, int32(20), int64(2e9), int64(0), int64(5e9), int32(20), int32(100))
	f.Add(int32(0), int32(-3), true, int32(-1), int64(-9e18), int64(9e18), int64(0), int32(-5), int32(-1))
	f.Add(int32(2147483647), int32(1), false, int32(2147483647), int64(0), int64(0), int64(0), int32(2147483647), int32(2147483647))
	f.Fuzz(func(t *testing.T, perSecond, partitions int32, isCounted bool, n int32, observed, started, now int64, floor, tokens int32) {
		c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: tokens, MinRetriesPerSecond: floor, Partitions: partitions,
			MaxRetriesPerSecond: perSecond, LimitRetriesPerSecond: true,
			Consumers: Consumers{Counted: isCounted, N: n, ObservedAt: time.Unix(0, observed)}}
		d := Denominator(c, time.Unix(0, started), time.Unix(0, now))
		if d < 0 {
			t.Fatalf("D = %d", d)
		}
		p := paramsOf(c, d)
		if p.perSecond < 0 || p.capacity < 0 || p.floor < 0 || p.maxRate < 0 {
			t.Fatalf("a negative share: %+v", p)
		}
		if isCounted {
			least := int64(max(n, 1))
			if n < 1 {
				least = int64(max(partitions, 1)) // a count of none is no evidence
			}
			if d != ZeroShare && d < least {
				t.Fatalf("D = %d below max(N, 1) = %d", d, least)
			}
			if p.perSecond > int64(max(perSecond, 0))*scale/least {
				t.Fatalf("per-second share %d above A/max(N,1)", p.perSecond)
			}
		}
		clk := clock.NewFake(time.Unix(0, now))
		b := New(c, clk, StartedAt(time.Unix(0, started)))
		for range 3 {
			b.Primary()
			b.TryRetry()
			b.Success()
			clk.Advance(time.Second)
		}
	})
}
