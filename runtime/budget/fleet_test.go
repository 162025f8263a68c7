package budget

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// fleet is a fleet budget of A retries per second with plenty of tokens,
// no floor and a generous ratio, so that only the per-second share decides.
// A counted one names this pod.
func fleet(perSecond, partitions int32, counted bool, n int32, observedAt time.Time) Config {
	c := Config{RetryPercent: 100, Window: time.Minute, MaxTokens: 100_000, Partitions: partitions,
		MaxRetriesPerSecond: &perSecond, Counted: counted, Included: counted && n > 0}
	if counted {
		c.Consumers = &policyconfig.Consumers{Count: n, ObservedAt: observedAt}
	}
	return c
}

// busy returns a budget on clk whose window holds enough primaries that the
// ratio never refuses, with its share in force: a counted share comes
// after the delivery bound, which busy waits.
func busy(c Config, clk *clock.Fake) *Budget {
	b := New(c, clk)
	for range 100_000 {
		b.Primary()
	}
	if c.Counted {
		clk.Advance(policyconfig.ConsumerCountDelivery)
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

// A fresh count that names the pod: D = N, for the per-second allowance,
// the tokens and the floor alike, each rounded down.
func TestAFreshNamingCountDividesByN(t *testing.T) {
	clk := clock.NewFake(start)
	b := busy(fleet(20, 20, true, 4, start), clk)
	if got := perSecond(b, clk, 5); !all(got, 5) {
		t.Fatalf("20/s over 4 counted pods is 5 a second, got %v", got)
	}
	c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, MinRetriesPerSecond: 5, Partitions: 20,
		Counted: true, Consumers: &policyconfig.Consumers{Count: 4, ObservedAt: start}, Included: true}
	clk = clock.NewFake(start)
	b = New(c, clk)
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if b.Denominator() != 4 || b.Tokens() != 2 {
		t.Fatalf("10 tokens over 4 pods is floor(2.5) = 2, got %v (D = %d)", b.Tokens(), b.Denominator())
	}
	clk.Advance(2 * time.Minute) // the start credit has left the window: only the floor grants
	c.Consumers.ObservedAt = clk.Now()
	b.Update(c)
	if n, _ := grants(b); n != 1 {
		t.Fatalf("a floor of 5/s over 4 pods is floor(1.25) = 1 a second, got %d", n)
	}
	if got, want := ShareOver(c, 4), (Share{Tokens: 2, MinRetriesPerSecond: 1}); got != want {
		t.Fatalf("ShareOver(4) = %+v, want %+v: what the budget holds", got, want)
	}
	if got, want := ShareOver(fleet(20, 20, true, 4, start), 3), (Share{Tokens: 33_333, MilliRetriesPerSecond: 6000, Limited: true}); got != want {
		t.Fatalf("ShareOver(3) = %+v, want %+v", got, want)
	}
	if got := ShareOver(c, ZeroShare); got != (Share{}) {
		t.Fatalf("a zero share holds %+v", got)
	}
}

// Shares round down, so N cold pods together never hold more than
// maxTokens: 20 pods of a budget of 10 tokens hold none each (on the old
// rule, ceil(10/20) = 1 each: 20 tokens, twice the declared figure).
func TestColdPodsNeverHoldMoreThanMaxTokens(t *testing.T) {
	for _, n := range []int32{1, 3, 7, 10, 20, 40} {
		c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, Partitions: 1,
			Counted: true, Consumers: &policyconfig.Consumers{Count: n, ObservedAt: start}, Included: true}
		clk := clock.NewFake(start)
		total := 0
		var budgets []*Budget
		for range n {
			budgets = append(budgets, New(c, clk))
		}
		clk.Advance(policyconfig.ConsumerCountDelivery)
		for _, b := range budgets {
			got, _ := grants(b) // cold: no real primary at all
			total += got
		}
		if total > 10 {
			t.Errorf("%d cold pods sharing 10 tokens granted %d retries", n, total)
		}
	}
}

// A count that does not name the pod gives it nothing, whatever its age:
// fresh, stale, a count of 0, or a pod with no identity. The pods it named
// may together be using the whole allowance.
func TestACountThatDoesNotNameThePodGivesItNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"a count of 4 that does not name it", fleet(20, 20, true, 4, start)},
		{"a count of 0", fleet(20, 20, true, 0, start)},
	} {
		tc.c.Included = false
		tc.c.MaxTokens, tc.c.MinRetriesPerSecond = 40, 20
		clk := clock.NewFake(start)
		b := busy(tc.c, clk)
		for clk.Now().Before(start.Add(3 * policyconfig.ConsumerCountStaleAfter)) {
			if n, d := grants(b); n != 0 || d != NoShare || b.Tokens() != 0 {
				t.Fatalf("%s, at %v: %d granted (%q), %v tokens; want none", tc.name, clk.Now().Sub(start), n, d, b.Tokens())
			}
			clk.Advance(700 * time.Millisecond)
		}
		if d := Denominator(tc.c, start.Add(time.Hour)); d != ZeroShare {
			t.Fatalf("%s, an hour stale: D = %d", tc.name, d)
		}
	}
	r := NewRegistry(clock.NewFake(start), WithPod(""), WithLogger(slog.New(slog.DiscardHandler)))
	b, _ := r.Resolve("shop", counted(1, 1, start, ""))
	if d := b.TryRetry(); d != NoShare {
		t.Fatalf("a pod without a UID, on a count that names the pod with none: %q", d)
	}
}

// A count that names the pod ends its zero share, after the delivery bound.
func TestANamingCountEndsTheZeroShare(t *testing.T) {
	clk := clock.NewFake(start)
	c := fleet(20, 20, true, 4, start)
	c.Included = false
	b := busy(c, clk)
	if d := b.TryRetry(); d != NoShare {
		t.Fatalf("before a count that names it: %q", d)
	}
	b.Update(fleet(20, 20, true, 5, clk.Now()))
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if got := perSecond(b, clk, 3); !all(got, 4) {
		t.Fatalf("20/s over 5 counted pods is 4 a second, got %v", got)
	}
}

// A stale count that names the pod (the controller down, or this pod's
// watch cut off) gives no share, reached by the pod with no new payload:
// the fleet may have grown meanwhile, whatever partitions says.
func TestAStaleCountGivesNoShare(t *testing.T) {
	for _, tc := range []struct {
		partitions, n int32
		fresh         int
	}{
		{partitions: 20, n: 4, fresh: 5},
		{partitions: 2, n: 10, fresh: 2},
		{partitions: 10, n: 10, fresh: 2},
		{partitions: 1, n: 4, fresh: 5}, // partitions at its default
	} {
		clk := clock.NewFake(start)
		b := busy(fleet(20, tc.partitions, true, tc.n, start), clk)
		if got := perSecond(b, clk, 3); !all(got, tc.fresh) {
			t.Errorf("P=%d N=%d fresh: %v a second, want %d", tc.partitions, tc.n, got, tc.fresh)
		}
		clk.Set(start.Add(policyconfig.ConsumerCountStaleAfter))
		if got := perSecond(b, clk, 3); !all(got, 0) {
			t.Errorf("P=%d N=%d stale: %v a second, want none", tc.partitions, tc.n, got)
		}
	}
}

// Without a count (the budget selects no consumers) the figures divide over
// the partitions, as they always have, at once: no count, no one to wait for.
func TestNoCountDividesByPartitions(t *testing.T) {
	clk := clock.NewFake(start)
	b := busy(fleet(20, 4, false, 0, time.Time{}), clk)
	if got := perSecond(b, clk, 3); !all(got, 5) {
		t.Fatalf("20/s over 4 partitions is 5 a second, got %v", got)
	}
	if d := Denominator(Config{Partitions: 0}, start); d != 1 {
		t.Fatalf("a missing partition count is one, got %d", d)
	}
	if b := New(seed(), clk); b.Denominator() != 1 || b.Tokens() != 10 {
		t.Fatalf("a budget without a count holds its share at once: D = %d, %v tokens", b.Denominator(), b.Tokens())
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
		MaxRetriesPerSecond: new(int32(10))}
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
	clk := clock.NewFake(start)
	b := busy(fleet(20, 20, true, 3, start), clk)
	if got := perSecond(b, clk, 5); !all(got, 6) {
		t.Fatalf("20/s over 3 pods (6.67) grants 6 a second, got %v", got)
	}
	clk = clock.NewFake(start)
	b = busy(fleet(20, 20, true, 30, start), clk)
	if got := perSecond(b, clk, 30); !all(got, 0) {
		t.Fatalf("20/s over 30 pods: below one retry a second, a pod grants none, got %v", got)
	}
	if _, d := grants(b); d != RateExceeded {
		t.Fatalf("below one retry a second: %q, want %q", d, RateExceeded)
	}
	// Credit saved over quiet seconds buys no burst.
	clk = clock.NewFake(start)
	b = busy(fleet(20, 20, true, 4, start), clk)
	clk.Advance(time.Hour)
	b.Update(fleet(20, 20, true, 4, clk.Now().Add(-time.Second)))
	if got := perSecond(b, clk, 1); got[0] != 5 {
		t.Fatalf("after an idle hour, %d granted in a second, want 5", got[0])
	}
}

// A count dated more than ConsumerCountClockSkew ahead of the pod's clock
// is no evidence of a recent count: it is treated as stale.
func TestClockSkewAllowance(t *testing.T) {
	c := fleet(20, 20, true, 4, time.Time{})
	for _, tc := range []struct {
		observed time.Duration // after start, judged at start+10s
		want     int64
	}{
		{observed: 10*time.Second + policyconfig.ConsumerCountClockSkew, want: 4}, // a little ahead: fresh
		{observed: 10*time.Second + policyconfig.ConsumerCountClockSkew + time.Millisecond, want: ZeroShare},
		{observed: 10*time.Second - policyconfig.ConsumerCountStaleAfter, want: 4}, // at the bound: fresh
		{observed: 10*time.Second - policyconfig.ConsumerCountStaleAfter - time.Millisecond, want: ZeroShare},
	} {
		c.Consumers.ObservedAt = start.Add(tc.observed)
		if d := Denominator(c, start.Add(10*time.Second)); d != tc.want {
			t.Errorf("count at start+%v, judged at start+10s: D = %d, want %d", tc.observed, d, tc.want)
		}
	}
}

// A shrinking share clamps the tokens at once; a growing one keeps them.
func TestACountChangeClampsTheTokens(t *testing.T) {
	clk := clock.NewFake(start)
	c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, Partitions: 20,
		Counted: true, Consumers: &policyconfig.Consumers{Count: 2, ObservedAt: start}, Included: true}
	b := New(c, clk)
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if b.Denominator() != 2 || b.Tokens() != 5 {
		t.Fatalf("10 tokens over 2 pods: %v", b.Tokens())
	}
	c.Consumers = &policyconfig.Consumers{Count: 10, ObservedAt: clk.Now()}
	b.Update(c)
	if b.Tokens() != 1 {
		t.Fatalf("10 tokens over 10 pods clamps the balance to 1 at once, got %v", b.Tokens())
	}
	c.Consumers = &policyconfig.Consumers{Count: 1, ObservedAt: clk.Now()}
	b.Update(c)
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if b.Denominator() != 1 || b.Tokens() != 1 {
		t.Fatalf("a larger share mints no tokens: D = %d, %v tokens", b.Denominator(), b.Tokens())
	}
}

// A share that grows waits the delivery bound after the pod reads the
// count, so that the pods whose shares the same count shrank have read it
// first: exactly ConsumerCountDelivery, not renewed by a count that asks for
// the same share, restarted by one that asks for another; a share that
// shrinks applies at once (on the old rule, every change applied at once).
func TestAShareWaitsTheDeliveryBoundBeforeItGrows(t *testing.T) {
	clk := clock.NewFake(start)
	b := busy(fleet(20, 20, true, 20, start), clk)
	if got := perSecond(b, clk, 1); got[0] != 1 {
		t.Fatalf("20/s over 20 pods: %v", got)
	}
	read := clk.Now()
	b.Update(fleet(20, 20, true, 2, read)) // the fleet shrank to 2 pods
	for clk.Now().Before(read.Add(policyconfig.ConsumerCountDelivery)) {
		if d := b.Denominator(); d != 20 {
			t.Fatalf("%v after reading N = 2: D = %d, want the old 20 until the delivery bound", clk.Now().Sub(read), d)
		}
		clk.Advance(250 * time.Millisecond)
		b.Update(fleet(20, 20, true, 2, clk.Now())) // renewals of the same count keep the wait served
	}
	if d := b.Denominator(); d != 2 {
		t.Fatalf("at the delivery bound: D = %d, want 2", d)
	}
	b.Update(fleet(20, 20, true, 10, clk.Now()))
	if d := b.Denominator(); d != 10 {
		t.Fatalf("a shrinking share applies at once: D = %d, want 10", d)
	}
	b.Update(fleet(20, 20, true, 4, clk.Now()))
	clk.Advance(policyconfig.ConsumerCountDelivery / 2)
	read = clk.Now()
	b.Update(fleet(20, 20, true, 5, read)) // another share: the wait starts again
	clk.Advance(policyconfig.ConsumerCountDelivery - time.Millisecond)
	if d := b.Denominator(); d != 10 {
		t.Fatalf("a count asking for another share restarts the wait: D = %d, want 10", d)
	}
	clk.Advance(time.Millisecond)
	if d := b.Denominator(); d != 5 {
		t.Fatalf("after the restarted wait: D = %d, want 5", d)
	}
}

// counted is a fleet budget's payload whose count names the pods with the
// given UIDs.
func counted(generation int64, n int32, observedAt time.Time, pods ...string) *policyconfig.Budget {
	limit := int32(20)
	b := payload("shared", generation, 10_000)
	b.UID, b.Partitions, b.MaxRetriesPerSecond = "budget-uid-1", 20, &limit
	b.Consumers = &policyconfig.Consumers{Count: n, ObservedAt: observedAt, Members: policyconfig.EncodeMembers(pods)}
	return b
}

// thisPod is the UID the tests' registries run as.
const thisPod = "pod-uid-0"

// Payloads of different policies carry counts taken at different times and
// may arrive in any order: the newest count wins, an older one never
// replaces it, and neither is a conflict.
func TestOutOfOrderCounts(t *testing.T) {
	clk := clock.NewFake(start.Add(30 * time.Second))
	r := NewRegistry(clk, WithPod(thisPod), WithLogger(slog.New(slog.DiscardHandler)))
	t10, t20, t25 := start.Add(10*time.Second), start.Add(20*time.Second), start.Add(25*time.Second)
	b, err := r.Resolve("shop", counted(1, 4, t20, thisPod))
	if err != nil || Denominator(r.budgets["shop/shared"].config, clk.Now()) != 4 {
		t.Fatalf("first payload: %v", err)
	}
	steps := []struct {
		what    string
		payload *policyconfig.Budget
		want    int32
	}{
		{"an older count, same generation", counted(1, 2, t10, thisPod), 4},
		{"a newer count, same generation", counted(1, 5, t25, thisPod), 5},
		{"a newer generation with an older count keeps the newer count", counted(2, 2, t10, thisPod), 5},
		{"an older generation's newer count is not applied", counted(1, 1, start.Add(29*time.Second), thisPod), 5},
	}
	for _, s := range steps {
		got, err := r.Resolve("shop", s.payload)
		if got != b || err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if e := r.budgets["shop/shared"]; e.config.Consumers.Count != s.want {
			t.Fatalf("%s: the budget holds a count of %d, want %d", s.what, e.config.Consumers.Count, s.want)
		}
	}
	if r.Conflicts() != 0 {
		t.Fatalf("counts caused %d conflicts", r.Conflicts())
	}
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if got := perSecond(b, clk, 2); !all(got, 4) {
		t.Fatalf("20/s over the newest count of 5 is 4 a second, got %v", got)
	}
	// The same generation without a count changes nothing; a newer
	// generation without one (the budget no longer selects consumers)
	// drops it, back to the partitions.
	noCount := counted(2, 0, time.Time{})
	noCount.Consumers = nil
	if _, err := r.Resolve("shop", noCount); err != nil || !r.budgets["shop/shared"].config.Counted {
		t.Fatalf("a same-generation payload without a count: %v", err)
	}
	noCount.Generation = 3
	if _, err := r.Resolve("shop", noCount); err != nil || r.budgets["shop/shared"].config.Counted {
		t.Fatalf("a newer generation without a count: %v", err)
	}
	// Other figures under the same generation are still a conflict.
	other := counted(3, 4, t25, thisPod)
	other.RetryPercent = 50
	if _, err := r.Resolve("shop", other); !errors.As(err, new(*Conflict)) {
		t.Fatalf("other figures, same generation: %v", err)
	}
}

// A count dated far ahead of this pod's clock (a controller clock far
// ahead) holds its lease from when the pod read it, then goes stale; a
// count dated before it, from the same controller's clock stepped back,
// never replaces it: counts are ordered on the controller's clock alone,
// and the pod meanwhile holds no share: fewer retries, never more.
func TestACountFromTheFutureHoldsItsLeaseFromItsReading(t *testing.T) {
	clk := clock.NewFake(start.Add(time.Minute))
	r := NewRegistry(clk, WithPod(thisPod))
	read := clk.Now()
	b, _ := r.Resolve("shop", counted(1, 4, clk.Now().Add(time.Hour), thisPod))
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if got := perSecond(b, clk, 2); !all(got, 5) {
		t.Fatalf("a count an hour ahead, just read: %v a second, want 20/s over 4 = 5", got)
	}
	if _, err := r.Resolve("shop", counted(1, 2, clk.Now(), thisPod)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if got := perSecond(b, clk, 2); !all(got, 5) {
		t.Fatalf("after a count dated before the held one: %v a second, want still 20/s over 4 = 5", got)
	}
	clk.Set(read.Add(policyconfig.ConsumerCountStaleAfter + time.Second))
	if got := perSecond(b, clk, 2); !all(got, 0) {
		t.Fatalf("the lease from its reading over: %v a second, want none", got)
	}
}

// A budget is known by its UID: a RetryBudget deleted and created again
// under the same name starts again at generation 1, and the registry takes
// its figures and count, in the same *Budget the policies already hold; a
// payload of the deleted one never comes back (on the old rule, generation
// 1 lost to the old generation 5 and its count).
func TestARecreatedBudgetIsANewBudget(t *testing.T) {
	clk := clock.NewFake(start)
	r := NewRegistry(clk, WithPod(thisPod), WithLogger(slog.New(slog.DiscardHandler)))
	old := counted(5, 2, start, thisPod, "pod-uid-1")
	*old.MaxRetriesPerSecond = 40
	b, _ := r.Resolve("shop", old)
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if got := perSecond(b, clk, 1); got[0] != 20 {
		t.Fatalf("the old budget: 40/s over 2 = 20 a second, got %v", got)
	}
	recreated := counted(1, 4, clk.Now(), thisPod, "pod-uid-1", "pod-uid-2", "pod-uid-3")
	recreated.UID = "budget-uid-2"
	got, err := r.Resolve("shop", recreated)
	if got != b || err != nil {
		t.Fatalf("the recreated budget: %v", err)
	}
	clk.Advance(policyconfig.ConsumerCountDelivery)
	if got := perSecond(b, clk, 2); !all(got, 5) {
		t.Fatalf("the recreated budget: 20/s over 4 = 5 a second, got %v", got)
	}
	if _, err := r.Resolve("shop", old); !errors.As(err, new(*Conflict)) {
		t.Fatalf("a payload of the deleted budget: %v, want a conflict", err)
	}
	if got := perSecond(b, clk, 1); got[0] != 5 {
		t.Fatalf("after the deleted budget's payload: %v a second, want 5", got)
	}
}

// The allowance and the count are pointers, as in the payload and the
// RetryBudget's spec, and a budget keeps its own copy of what they point
// to: a caller that changes what a Config or a payload it passed points to,
// or what a Conflict reports, changes no budget and no registry's record.
func TestABudgetKeepsItsOwnCopyOfTheAllowanceAndTheCount(t *testing.T) {
	clk := clock.NewFake(start)
	c := fleet(20, 20, true, 4, start)
	b := busy(c, clk)
	*c.MaxRetriesPerSecond, c.Consumers.Count = 0, 1
	if got := perSecond(b, clk, 2); !all(got, 5) {
		t.Fatalf("after the caller changed its Config: %v a second, want still 20/s over 4 = 5", got)
	}
	r := NewRegistry(clk, WithPod(thisPod), WithLogger(slog.New(slog.DiscardHandler)))
	p := counted(1, 4, clk.Now(), thisPod)
	if _, err := r.Resolve("shop", p); err != nil {
		t.Fatal(err)
	}
	*p.MaxRetriesPerSecond, p.Consumers.Count = 0, 1
	other := counted(1, 4, clk.Now(), thisPod)
	other.RetryPercent = 50
	var conflict *Conflict
	if _, err := r.Resolve("shop", other); !errors.As(err, &conflict) {
		t.Fatalf("other figures, same generation: %v, want a conflict", err)
	}
	*conflict.Kept.MaxRetriesPerSecond, conflict.Kept.Consumers.Count = 0, 1
	for _, held := range []Config{r.budgets["shop/shared"].config, r.budgets["shop/shared"].offered} {
		if *held.MaxRetriesPerSecond != 20 || held.Consumers.Count != 4 {
			t.Fatalf("the registry holds an allowance of %d and a count of %d, want 20 and 4", *held.MaxRetriesPerSecond, held.Consumers.Count)
		}
	}
}

// A pod whose payloads arrive later than the delivery bound (a mounted
// volume) takes no share of a counted budget, whatever the count says, and
// says why; a budget without a count, which needs no delivery, is
// unaffected.
func TestASlowSourceTakesNoShareOfACountedBudget(t *testing.T) {
	var logged bytes.Buffer
	clk := clock.NewFake(start)
	r := NewRegistry(clk, WithPod(thisPod), WithDelivery(90*time.Second), WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	b, _ := r.Resolve("shop", counted(1, 1, start, thisPod))
	for range 5 {
		clk.Advance(time.Second)
		if d := b.TryRetry(); d != SlowDelivery {
			t.Fatalf("a slow source: %q, want %q", d, SlowDelivery)
		}
	}
	if !strings.Contains(logged.String(), "later than the delivery bound") {
		t.Fatalf("the registry did not say why: %s", logged.String())
	}
	partitioned := payload("own", 1, 10)
	p, _ := r.Resolve("shop", partitioned)
	if d := p.TryRetry(); d != Allowed {
		t.Fatalf("a slow source's budget without a count: %q", d)
	}
	fast := NewRegistry(clk, WithPod(thisPod), WithDelivery(policyconfig.ConsumerCountDelivery))
	f, _ := fast.Resolve("shop", counted(1, 1, clk.Now(), thisPod))
	clk.Advance(policyconfig.ConsumerCountDelivery + time.Second)
	if d := f.TryRetry(); d != Allowed {
		t.Fatalf("a source within the bound: %q", d)
	}
}

// Concurrent retries while counts change: no second grants more than the
// largest share allows, and the tokens stay in range. Run with -race.
func TestConcurrentRetriesWithCountUpdates(t *testing.T) {
	clk := clock.NewFake(start)
	r := NewRegistry(clk, WithPod(thisPod))
	b, _ := r.Resolve("shop", counted(1, 4, start, thisPod))
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
						at := start.Add(time.Duration(sec*1000+i) * time.Millisecond)
						_, _ = r.Resolve("shop", counted(1, int32(2+(sec+i)%5), at, thisPod))
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

// FuzzShare: whatever a payload and the clock say, the share computation
// never panics, D is never negative, a count that does not name the pod
// gives it nothing, and one that does never more than A/N of any absolute
// figure.
func FuzzShare(f *testing.F) {
	f.Add(int32(20), int32(20), true, true, int32(20), int64(2e9), int64(5e9), int32(20), int32(100))
	f.Add(int32(0), int32(-3), true, false, int32(-1), int64(-9e18), int64(0), int32(-5), int32(-1))
	f.Add(int32(2147483647), int32(1), false, true, int32(2147483647), int64(0), int64(0), int32(2147483647), int32(2147483647))
	f.Fuzz(func(t *testing.T, perSecond, partitions int32, isCounted, included bool, n int32, observed, now int64, floor, tokens int32) {
		c := Config{RetryPercent: 10, Window: time.Minute, MaxTokens: tokens, MinRetriesPerSecond: floor, Partitions: partitions,
			MaxRetriesPerSecond: &perSecond, Counted: isCounted,
			Consumers: &policyconfig.Consumers{Count: n, ObservedAt: time.Unix(0, observed)}, Included: included}
		d := Denominator(c, time.Unix(0, now))
		if d < 0 {
			t.Fatalf("D = %d", d)
		}
		p := paramsOf(c, d)
		if p.perSecond < 0 || p.capacity < 0 || p.floor < 0 || p.maxRate < 0 {
			t.Fatalf("a negative share: %+v", p)
		}
		if isCounted {
			if (!included || n < 1) && d != ZeroShare {
				t.Fatalf("a count that does not name the pod: D = %d", d)
			}
			if d != ZeroShare && d < int64(n) {
				t.Fatalf("D = %d below N = %d", d, n)
			}
			if d != ZeroShare && (p.perSecond > int64(max(perSecond, 0))*scale/int64(n) || p.capacity > int64(max(tokens, 1))*scale/int64(n)) {
				t.Fatalf("a share above A/N: %+v", p)
			}
		}
		clk := clock.NewFake(time.Unix(0, now))
		b := New(c, clk)
		for range 3 {
			b.Primary()
			b.TryRetry()
			b.Success()
			clk.Advance(time.Second)
		}
	})
}

// A new generation of the budget that arrives with the same count keeps
// what that count now says of this pod: a pod its shard dropped holds no
// share, though the count it was named under is kept.
func TestANewGenerationNeverUndoesARemoval(t *testing.T) {
	clk := clock.NewFake(start.Add(30 * time.Second))
	r := NewRegistry(clk, WithPod(thisPod), WithLogger(slog.New(slog.DiscardHandler)))
	t20 := start.Add(20 * time.Second)
	if _, err := r.Resolve("shop", counted(1, 4, t20, thisPod)); err != nil || Denominator(r.budgets["shop/shared"].config, clk.Now()) != 4 {
		t.Fatalf("named: %v", err)
	}
	if _, err := r.Resolve("shop", counted(2, 4, t20)); err != nil {
		t.Fatal(err)
	}
	if d := Denominator(r.budgets["shop/shared"].config, clk.Now()); d != ZeroShare {
		t.Fatalf("dropped from the same count under a new generation: denominator %d, want no share", d)
	}
}
