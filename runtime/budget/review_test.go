package budget_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// Review probes of issue 19's promises, through the public API only:
// budget.NewRegistry, Registry.Resolve, Budget.TryRetry on fake clocks.

var reviewT0 = time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)

// reviewFleet is seed 003's 20/s fleet allowance with tokens and a ratio
// that never refuse, partitions at the CRD's default (1).
func reviewFleet(uid string, n int, at time.Time, members ...string) *policyconfig.Budget {
	a := int32(20)
	b := &policyconfig.Budget{Name: "payments", UID: uid, Generation: 1, RetryPercent: 100,
		Window: policyconfig.Duration(time.Minute), MaxTokens: 100_000, Partitions: 1, MaxRetriesPerSecond: &a}
	b.Consumers = &policyconfig.Consumers{Count: int32(n), ObservedAt: at, Members: policyconfig.EncodeMembers(members)}
	return b
}

type reviewPod struct {
	clk *clock.Fake
	reg *budget.Registry
	b   *budget.Budget
}

func newReviewPod(uid string, clk *clock.Fake) *reviewPod {
	return &reviewPod{clk: clk, reg: budget.NewRegistry(clk, budget.WithPod(uid), budget.WithLogger(slog.New(slog.DiscardHandler)))}
}

func (p *reviewPod) resolve(b *policyconfig.Budget) { p.b, _ = p.reg.Resolve("shop", b) }

// grantsNow asks for retries until one is refused, with primaries first so
// the ratio (retryPercent 100) never decides.
func (p *reviewPod) grantsNow() int {
	if p.b == nil {
		return 0
	}
	n := 0
	for ; n < 100_000; n++ {
		p.b.Primary()
		p.b.Primary()
		if p.b.TryRetry() != budget.Allowed {
			break
		}
	}
	return n
}

func reviewMembers(n int) []string {
	out := []string{"a", "b"}
	for i := range n - 2 {
		out = append(out, fmt.Sprintf("c%d", i))
	}
	return out
}

// TestReviewSkewedPodNeverTakesNewerCount: two pods whose clocks are 3 s
// behind the controller's (beyond the 1 s skew) read every count as "from
// the future"; the registry zeroes its observedAt and then never takes a
// newer count (zero is not After zero). After a scale-up 2 → 20 they keep
// allowance/2 forever while 18 new pods take allowance/20.
// Breaks: "the fleet can grow ... and never grant more than A in a second";
// docs "A count from the future is held as stale; the next true count
// replaces it"; "a skew shortens or lengthens the 60 s lease by the skew".
func TestReviewSkewedPodNeverTakesNewerCount(t *testing.T) {
	skew := 3 * time.Second
	ctl := clock.NewFake(reviewT0)
	a, b := newReviewPod("a", clock.NewFake(reviewT0.Add(-skew))), newReviewPod("b", clock.NewFake(reviewT0.Add(-skew)))
	pods := []*reviewPod{a, b}
	first := reviewFleet("u1", 2, ctl.Now(), "a", "b")
	a.resolve(first)
	b.resolve(first)
	members := reviewMembers(20)
	for sec := 1; sec <= 150; sec++ {
		ctl.Set(reviewT0.Add(time.Duration(sec)*time.Second + 10*time.Millisecond))
		for _, p := range pods {
			p.clk.Set(ctl.Now().Add(-skew))
			if p != a && p != b {
				p.clk.Set(ctl.Now())
			}
		}
		if sec == 10 {
			for _, m := range members[2:] {
				pods = append(pods, newReviewPod(m, clock.NewFake(ctl.Now())))
			}
		}
		if sec >= 10 && sec%5 == 0 { // the controller republishes the count of 20
			c := reviewFleet("u1", 20, ctl.Now(), members...)
			for _, p := range pods {
				p.resolve(c)
			}
		}
		total := 0
		for _, p := range pods {
			total += p.grantsNow()
		}
		if sec > 20 && total > 20 {
			t.Fatalf("second %d: the fleet granted %d retries > allowance 20 (pods a, b: D = %d, %d)", sec, total,
				a.b.Denominator(), b.b.Denominator())
		}
	}
}

// TestReviewCutOffPodKeepsOldShareAfterStale: partitions at the default 1,
// a scale-up 2 → 20, and old pod "a" whose watch is broken (it never hears
// the new count). Its count goes stale at 60 s and D falls back to
// max(P, N) = max(1, 2) = 2: it keeps allowance/2 forever.
// Breaks docs: "beyond it (a watch that is broken and re-listing), a pod can
// keep a larger share until it hears the new count or its own count goes
// stale, at most 60 s"; seed 003 "define behavior when budget coordination fails".
func TestReviewCutOffPodKeepsOldShareAfterStale(t *testing.T) {
	clk := clock.NewFake(reviewT0)
	a, b := newReviewPod("a", clk), newReviewPod("b", clk)
	pods := []*reviewPod{a, b}
	first := reviewFleet("u1", 2, clk.Now(), "a", "b")
	a.resolve(first)
	b.resolve(first)
	members := reviewMembers(20)
	for sec := 1; sec <= 180; sec++ {
		clk.Set(reviewT0.Add(time.Duration(sec)*time.Second + 10*time.Millisecond))
		if sec == 10 {
			for _, m := range members[2:] {
				pods = append(pods, newReviewPod(m, clk))
			}
		}
		if sec >= 10 && sec%15 == 10 {
			c := reviewFleet("u1", 20, clk.Now(), members...)
			for _, p := range pods[1:] { // every pod but a
				p.resolve(c)
			}
		}
		total := 0
		for _, p := range pods {
			total += p.grantsNow()
		}
		if sec > 61+10 && total > 20 {
			t.Fatalf("second %d: the fleet granted %d retries > allowance 20; cut-off pod a, its count %d s old, holds D = %d",
				sec, total, sec, a.b.Denominator())
		}
	}
}

// TestReviewTwoRegistriesInOnePodTakeTwoShares: a count counts pods, but a
// share is taken per Registry, and retry.New without WithBudgets makes one
// registry per executor. A pod with two executors (or two containers with
// the same POD_UID) holds two shares: 3 × 20/2 = 30 > 20 for a count of 2.
// Breaks: "the pods a count names hold at most A together".
func TestReviewTwoRegistriesInOnePodTakeTwoShares(t *testing.T) {
	clk := clock.NewFake(reviewT0)
	pods := []*reviewPod{newReviewPod("a", clk), newReviewPod("a", clk), newReviewPod("b", clk)}
	c := reviewFleet("u1", 2, clk.Now(), "a", "b")
	for _, p := range pods {
		p.resolve(c)
	}
	for sec := 3; sec <= 6; sec++ {
		clk.Set(reviewT0.Add(time.Duration(sec)*time.Second + 10*time.Millisecond))
		total := 0
		for _, p := range pods {
			total += p.grantsNow()
		}
		if total > 20 {
			t.Fatalf("second %d: pods a (two registries) and b granted %d retries > allowance 20", sec, total)
		}
	}
}

// TestReviewFloorBreaksTenPercent: minRetriesPerSecond grants whatever the
// ratio, so a pod with 5 failing primaries/s makes 1 retry/s: 20% of a
// window holding 300 ≥ Credit real primaries.
// Breaks INV-RTY-04 "Under no circumstance may retry volume exceed 10% of
// primary request volume over any 60-second rolling window", and the
// issue's acceptance "every 60 s window at or below retryPercent once it
// holds Credit real primaries".
func TestReviewFloorBreaksTenPercent(t *testing.T) {
	clk := clock.NewFake(reviewT0)
	p := newReviewPod("a", clk)
	p.resolve(&policyconfig.Budget{Name: "payments", UID: "u1", Generation: 1, RetryPercent: 10,
		Window: policyconfig.Duration(time.Minute), MaxTokens: 10, MinRetriesPerSecond: 1, Partitions: 1})
	var retries, primaries [180]int
	for s := range 180 {
		for i := range 5 {
			clk.Set(reviewT0.Add(time.Duration(s)*time.Second + time.Duration(i)*200*time.Millisecond))
			p.b.Primary()
			primaries[s]++
			if p.b.TryRetry() == budget.Allowed {
				retries[s]++
			}
		}
	}
	credit := budget.Credit(budget.Config{RetryPercent: 10, MaxTokens: 10, Partitions: 1})
	for end := 120; end <= 180; end++ { // windows wholly after the cold start
		r, q := 0, 0
		for s := end - 60; s < end; s++ {
			r, q = r+retries[s], q+primaries[s]
		}
		if int64(q) >= credit && r*100 > 10*q {
			t.Fatalf("seconds [%d, %d): %d retries > 10%% of %d primaries (credit %d)", end-60, end, r, q, credit)
		}
	}
}

// TestReviewRecreatedBudgetForgetsItsWindow: a new UID resets the window
// too, so a pod that spent its retries 50 s ago gets its bucket and start
// credit again: one 60 s window of the pod's real traffic holds 20 retries
// for 120 primaries (16.7%).
// Breaks INV-RTY-04 "over any 60-second rolling window".
func TestReviewRecreatedBudgetForgetsItsWindow(t *testing.T) {
	clk := clock.NewFake(reviewT0)
	p := newReviewPod("a", clk)
	fig := func(uid string) *policyconfig.Budget {
		return &policyconfig.Budget{Name: "payments", UID: uid, Generation: 1, RetryPercent: 10,
			Window: policyconfig.Duration(time.Minute), MaxTokens: 10, Partitions: 1}
	}
	p.resolve(fig("u1"))
	retries, primaries := 0, 0
	for i := range 120 { // 2 failing primaries a second for 60 s
		clk.Set(reviewT0.Add(time.Duration(i) * 500 * time.Millisecond))
		if i == 100 {
			p.resolve(fig("u2")) // deleted and created again at 50 s
		}
		p.b.Primary()
		primaries++
		for p.b.TryRetry() == budget.Allowed {
			retries++
		}
	}
	if retries*100 > 10*primaries {
		t.Fatalf("seconds [0, 60): %d retries > 10%% of %d primaries", retries, primaries)
	}
}
