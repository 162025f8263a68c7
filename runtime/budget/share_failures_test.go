package budget_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
)

// Failures of coordination that must cost retries, never add them (issue
// 19; RG-LOAD: "define behavior when budget coordination fails"), through
// the public API only: budget.NewRegistry, Registry.Resolve,
// Budget.TryRetry on fake clocks.

var fleetT0 = time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)

// namedFleet is RG-LOAD's 20/s fleet allowance with tokens and a ratio
// that never refuse, partitions at the CRD's default (1).
func namedFleet(uid string, n int, at time.Time, members ...string) *policyconfig.Budget {
	a := int32(20)
	b := &policyconfig.Budget{Name: "payments", UID: uid, Generation: 1, RetryPercent: 100,
		Window: policyconfig.Duration(time.Minute), MaxTokens: 100_000, Partitions: 1, MaxRetriesPerSecond: &a}
	b.Consumers = &policyconfig.Consumers{Count: int32(n), ObservedAt: at, Members: policyconfig.EncodeMembers(members)}
	return b
}

type fleetPod struct {
	clk *clock.Fake
	reg *budget.Registry
	b   *budget.Budget
}

func newFleetPod(uid string, clk *clock.Fake) *fleetPod {
	return &fleetPod{clk: clk, reg: budget.NewRegistry(clk, budget.WithPod(uid), budget.WithLogger(slog.New(slog.DiscardHandler)))}
}

func (p *fleetPod) resolve(b *policyconfig.Budget) { p.b, _ = p.reg.Resolve("shop", b) }

// grantsNow asks for retries until one is refused, with primaries first so
// the ratio (retryPercent 100) never decides.
func (p *fleetPod) grantsNow() int {
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

// twoNamedPods are pods a and b on clocks ca and cb, named by a count of
// 2 taken at at.
func twoNamedPods(ca, cb *clock.Fake, at time.Time) (a, b *fleetPod) {
	a, b = newFleetPod("a", ca), newFleetPod("b", cb)
	first := namedFleet("u1", 2, at, "a", "b")
	a.resolve(first)
	b.resolve(first)
	return a, b
}

// fleetGrants is the retries pods grant now, together.
func fleetGrants(pods []*fleetPod) int {
	total := 0
	for _, p := range pods {
		total += p.grantsNow()
	}
	return total
}

func fleetMembers(n int) []string {
	out := []string{"a", "b"}
	for i := range n - 2 {
		out = append(out, fmt.Sprintf("c%d", i))
	}
	return out
}

// Two pods whose clocks run 3 s behind the controller's (beyond the 1 s
// skew) read every count as dated in the future; they must still take each
// newer count, ordered on the controller's clock, so that after a scale-up
// 2 → 20 they hold allowance/20 like the 18 new pods, and the fleet never
// grants more than the allowance in a second. (The registry used to zero
// such a count's observedAt and then refuse every later count.)
func TestAPodWhoseClockRunsBehindTakesEveryNewerCount(t *testing.T) {
	skew := 3 * time.Second
	ctl := clock.NewFake(fleetT0)
	a, b := twoNamedPods(clock.NewFake(fleetT0.Add(-skew)), clock.NewFake(fleetT0.Add(-skew)), ctl.Now())
	pods := []*fleetPod{a, b}
	members := fleetMembers(20)
	for sec := 1; sec <= 150; sec++ {
		ctl.Set(fleetT0.Add(time.Duration(sec)*time.Second + 10*time.Millisecond))
		for _, p := range pods {
			p.clk.Set(ctl.Now().Add(-skew))
			if p != a && p != b {
				p.clk.Set(ctl.Now())
			}
		}
		if sec == 10 {
			for _, m := range members[2:] {
				pods = append(pods, newFleetPod(m, clock.NewFake(ctl.Now())))
			}
		}
		if sec >= 10 && sec%5 == 0 { // the controller republishes the count of 20
			c := namedFleet("u1", 20, ctl.Now(), members...)
			for _, p := range pods {
				p.resolve(c)
			}
		}
		total := fleetGrants(pods)
		if sec > 20 && total > 20 {
			t.Fatalf("second %d: the fleet granted %d retries > allowance 20 (pods a, b: D = %d, %d)", sec, total,
				a.b.Denominator(), b.b.Denominator())
		}
	}
}

// Partitions at the default 1, a scale-up 2 → 20, and old pod "a" whose
// watch is broken (it never hears the new count). Once its count is stale
// it holds no share, so the fleet is back within the allowance (it used to
// fall back to max(P, N) = max(1, 2) and keep allowance/2 forever).
// docs/runtime.md: a pod keeps a larger share "until it hears the new count
// or its own count goes stale, at most 60 s".
func TestACutOffPodHoldsNoShareOnceItsCountIsStale(t *testing.T) {
	clk := clock.NewFake(fleetT0)
	a, b := twoNamedPods(clk, clk, clk.Now())
	pods := []*fleetPod{a, b}
	members := fleetMembers(20)
	for sec := 1; sec <= 180; sec++ {
		clk.Set(fleetT0.Add(time.Duration(sec)*time.Second + 10*time.Millisecond))
		if sec == 10 {
			for _, m := range members[2:] {
				pods = append(pods, newFleetPod(m, clk))
			}
		}
		if sec >= 10 && sec%15 == 10 {
			c := namedFleet("u1", 20, clk.Now(), members...)
			for _, p := range pods[1:] { // every pod but a
				p.resolve(c)
			}
		}
		total := fleetGrants(pods)
		if sec > 61+10 && total > 20 {
			t.Fatalf("second %d: the fleet granted %d retries > allowance 20; cut-off pod a, its count %d s old, holds D = %d",
				sec, total, sec, a.b.Denominator())
		}
	}
}

// A count counts pods, and retry.New without WithBudgets makes one
// registry per executor: two registries of one process for the same pod
// must hold one share between them, so that "the pods a count names hold
// at most A together" (they used to hold 3 × 20/2 = 30 for a count of 2).
func TestOneProcessHoldsOneShareWhateverItsRegistries(t *testing.T) {
	clk := clock.NewFake(fleetT0)
	pods := []*fleetPod{newFleetPod("a", clk), newFleetPod("a", clk), newFleetPod("b", clk)}
	c := namedFleet("u1", 2, clk.Now(), "a", "b")
	for _, p := range pods {
		p.resolve(c)
	}
	for sec := 3; sec <= 6; sec++ {
		clk.Set(fleetT0.Add(time.Duration(sec)*time.Second + 10*time.Millisecond))
		total := fleetGrants(pods)
		if total > 20 {
			t.Fatalf("second %d: pods a (two registries) and b granted %d retries > allowance 20", sec, total)
		}
	}
}

// INV-RTY-04: "Under no circumstance may retry volume exceed 10% of
// primary request volume over any 60-second rolling window", and issue 19's
// acceptance "every 60 s window at or below retryPercent once it holds
// Credit real primaries": a floor of 1/s for a pod with 5 failing
// primaries/s must not make 20% of a window holding 300 ≥ Credit of them.
func TestTheFloorNeverPassesRetryPercentOnceTheWindowHoldsCredit(t *testing.T) {
	clk := clock.NewFake(fleetT0)
	p := newFleetPod("a", clk)
	p.resolve(&policyconfig.Budget{Name: "payments", UID: "u1", Generation: 1, RetryPercent: 10,
		Window: policyconfig.Duration(time.Minute), MaxTokens: 10, MinRetriesPerSecond: 1, Partitions: 1})
	var retries, primaries [180]int
	for s := range 180 {
		for i := range 5 {
			clk.Set(fleetT0.Add(time.Duration(s)*time.Second + time.Duration(i)*200*time.Millisecond))
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

// A new UID keeps the window: a pod that spent its retries 50 s ago gets
// no second bucket or start credit, so one 60 s window of its traffic stays
// within retryPercent (INV-RTY-04, "over any 60-second rolling window"; it
// used to hold 20 retries for 120 primaries, 16.7%).
func TestARecreatedBudgetKeepsItsWindow(t *testing.T) {
	clk := clock.NewFake(fleetT0)
	p := newFleetPod("a", clk)
	fig := func(uid string) *policyconfig.Budget {
		return &policyconfig.Budget{Name: "payments", UID: uid, Generation: 1, RetryPercent: 10,
			Window: policyconfig.Duration(time.Minute), MaxTokens: 10, Partitions: 1}
	}
	p.resolve(fig("u1"))
	retries, primaries := 0, 0
	for i := range 120 { // 2 failing primaries a second for 60 s
		clk.Set(fleetT0.Add(time.Duration(i) * 500 * time.Millisecond))
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
