package budget

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// The fleet simulation: seed 003's toy on a virtual clock. A base of
// 100 primaries/s spread over the live pods, a dependency that fails every
// call, every failure asking for retries; a fleet allowance of 20 retries/s.
// Each pod is its own process with its own Registry, as separate pods are;
// all of them read one stream of payloads from a simulated controller that
// counts pod objects and republishes on every change and every
// ConsumerCountRefresh (YoungConsumerRefresh while a pod object is young),
// as the controller does.
const (
	simStep           = 10 * time.Millisecond // one primary per step: 100/s
	simFleetAllowance = 20                    // maxRetriesPerSecond, and minRetriesPerSecond
	simPods           = 20
	simAttempts       = 10 // a failure asks for up to 9 retries, stopping at the first refusal
	// simCacheLag is how far the controller's view of pod objects trails
	// the API server: it recounts, and publishes, that long after a change.
	simCacheLag = 500 * time.Millisecond
	// simTolerance is the bound's slack: 20/s +5%.
	simTolerance = simFleetAllowance * 105 / 100
)

// simBudget is a budget as one pod's payload carries it. The controller's
// count is nil when it publishes none.
type simBudget func(count *policyconfig.Consumers) *policyconfig.Budget

// fleetBudget is the fleet budget: 20/s over the counted consumers, at
// most 20 of them declared.
func fleetBudget(count *policyconfig.Consumers) *policyconfig.Budget {
	limit := int32(simFleetAllowance)
	return &policyconfig.Budget{Name: "payments", Generation: 1, RetryPercent: 20, Window: policyconfig.Duration(10 * time.Second),
		MaxTokens: 20, MinRetriesPerSecond: simFleetAllowance, Partitions: simPods, MaxRetriesPerSecond: &limit, Consumers: count}
}

// perProcessBudget is the same figures enforced by each pod alone: no
// consumers, one partition, so every pod allows 20/s.
func perProcessBudget(*policyconfig.Consumers) *policyconfig.Budget {
	b := fleetBudget(nil)
	b.Partitions = 1
	return b
}

type simScenario struct {
	name    string
	initial int           // pod objects at the start
	added   int           // pod objects created from addAt on, one a second
	addAt   time.Duration //
	stopAt  time.Duration // the controller stops (0: it never does)
	length  time.Duration
}

type simPod struct {
	created, started time.Time
	budgets          []*Budget // one per simulated budget; nil until the process starts
	registries       []*Registry
}

// simResult is one budget's run: retries and offered attempts (primaries
// plus retries) in each second.
type simResult struct {
	retries, offered []int
}

func (r simResult) max() int {
	m := 0
	for _, v := range r.retries {
		m = max(m, v)
	}
	return m
}

func mean(v []int) float64 {
	sum := 0
	for _, x := range v {
		sum += x
	}
	return float64(sum) / float64(len(v))
}

// simulate runs sc once for each budget, over the same pods and the same
// demand, second by second on one virtual clock.
func simulate(sc simScenario, seed uint64, budgets ...simBudget) []simResult {
	rng := rand.New(rand.NewPCG(seed, 3))
	t0 := time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	var pods []*simPod
	create := func(at time.Time) {
		// A process starts 0.2–8 s after its pod object exists (scheduling,
		// image, init), at any point in a second: some before the
		// controller has counted the object, most after.
		delay := 200*time.Millisecond + time.Duration(rng.Int64N(int64(7800*time.Millisecond)))
		pods = append(pods, &simPod{created: at, started: at.Add(delay),
			budgets: make([]*Budget, len(budgets)), registries: make([]*Registry, len(budgets))})
	}
	for range sc.initial {
		create(t0)
	}
	seconds := int(sc.length / time.Second)
	results := make([]simResult, len(budgets))
	for i := range results {
		results[i] = simResult{retries: make([]int, seconds), offered: make([]int, seconds)}
	}
	var published *policyconfig.Consumers // the latest count, in every payload
	var lastPublished time.Time
	next := 0 // the pod the next primary goes to
	for step := 0; clk.Now().Before(t0.Add(sc.length)); step++ {
		now := clk.Now()
		elapsed := now.Sub(t0)
		if sc.added > 0 && elapsed >= sc.addAt && elapsed < sc.addAt+time.Duration(sc.added)*time.Second && elapsed%time.Second == 0 {
			create(now)
		}
		// The controller: counts the pod objects its cache shows, and
		// republishes on a change and at least every refresh, or every
		// young refresh while a counted pod is young.
		if sc.stopAt == 0 || elapsed < sc.stopAt {
			seen := int32(0)
			refresh := policyconfig.ConsumerCountRefresh
			for _, p := range pods {
				if !p.created.After(now.Add(-simCacheLag)) {
					seen++
					if now.Sub(p.created) < policyconfig.YoungConsumerWindow {
						refresh = policyconfig.YoungConsumerRefresh
					}
				}
			}
			if published == nil || seen != published.Count || now.Sub(lastPublished) >= refresh {
				published, lastPublished = &policyconfig.Consumers{Count: seen, ObservedAt: now}, now
				for _, p := range pods {
					for i, reg := range p.registries {
						if reg != nil {
							p.budgets[i], _ = reg.Resolve("shop", budgets[i](published))
						}
					}
				}
			}
		}
		// Processes that start now read the current payload.
		var live []*simPod
		for _, p := range pods {
			if p.registries[0] == nil && !p.started.After(now) {
				for i, b := range budgets {
					p.registries[i] = NewRegistry(clk)
					p.budgets[i], _ = p.registries[i].Resolve("shop", b(published))
				}
			}
			if p.registries[0] != nil {
				live = append(live, p)
			}
		}
		sec := int(elapsed / time.Second)
		if len(live) > 0 {
			p := live[next%len(live)]
			next++
			for i, b := range p.budgets {
				b.Primary()
				results[i].offered[sec]++
				for attempt := 2; attempt <= simAttempts && b.TryRetry() == Allowed; attempt++ {
					results[i].retries[sec]++
					results[i].offered[sec]++
				}
			}
		}
		clk.Advance(simStep)
	}
	return results
}

// TestFleetBudgetSimulation: the fleet budget keeps the aggregate at or
// below 20 retries/s (+5%) in every second, steady, during a scale-up from
// 2 to 20 consumers, while the controller is stopped, and during a scale-up
// while it is stopped; the same figures enforced per process allow 400/s.
func TestFleetBudgetSimulation(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "%-58s %6s %7s %9s %10s %14s %7s\n", "scenario", "max/s", "mean/s", "offered/s",
		"mean/s>=60s", "offered/s>=60s", "zero-s")
	row := func(name string, r simResult) {
		zero := 0
		for _, v := range r.retries {
			if v == 0 {
				zero++
			}
		}
		fmt.Fprintf(&table, "%-58s %6d %7.1f %9.1f %10.1f %14.1f %7d\n", name, r.max(), mean(r.retries), mean(r.offered),
			mean(r.retries[60:]), mean(r.offered[60:]), zero)
	}
	bounded := func(name string, r simResult) {
		t.Helper()
		for s, v := range r.retries {
			if v > simTolerance {
				t.Errorf("%s: %d retries in second %d, above %d", name, v, s, simTolerance)
			}
		}
		if mean(r.retries) < simFleetAllowance/2 {
			t.Errorf("%s: a mean of %.1f retries/s: the fleet budget starves the fleet", name, mean(r.retries))
		}
	}

	steady := simScenario{name: "steady", initial: simPods, length: 180 * time.Second}
	res := simulate(steady, 1, fleetBudget, perProcessBudget)
	row("(a) 20 pods, fleet budget", res[0])
	row("(b) the same 20 pods, per-process budgets (same run)", res[1])
	bounded("(a)", res[0])
	if m := mean(res[1].retries[60:]); m < 380 {
		t.Errorf("(b) per-process budgets: a mean of %.1f retries/s once all run, want about 400", m)
	}
	if res[1].max() <= simTolerance {
		t.Errorf("(b) per-process budgets never exceeded the fleet bound: %d", res[1].max())
	}
	if m := mean(res[0].retries[60:]); m < simFleetAllowance*0.95 {
		t.Errorf("(a) steady: a mean of %.1f retries/s, want about 20", m)
	}

	for _, sc := range []simScenario{
		{name: "(c) scale-up 2 → 20 consumers", initial: 2, added: 18, addAt: 60 * time.Second, length: 200 * time.Second},
		{name: "(d) controller stopped at 60 s, 20 pods", initial: simPods, stopAt: 60 * time.Second, length: 240 * time.Second},
		{name: "(e) controller stopped at 30 s, scale-up 2 → 20 at 60 s", initial: 2, added: 18, addAt: 60 * time.Second,
			stopAt: 30 * time.Second, length: 240 * time.Second},
	} {
		for seed := range uint64(5) {
			r := simulate(sc, seed, fleetBudget)[0]
			bounded(fmt.Sprintf("%s, seed %d", sc.name, seed), r)
			if seed == 0 {
				row(sc.name, r)
			}
		}
	}
	// Fleets whose count does not divide the allowance: 8 pods hold 2 a
	// second each (16 in all, the fraction lost, never exceeded); 30 pods,
	// more than the allowance's retries a second, hold none (one retry
	// each would make 30 in a second). Both only ever stay under the bound.
	for _, sc := range []struct {
		simScenario
		starves bool
	}{
		{simScenario{name: "(f) 8 pods: 20/8 rounds down to 2 each", initial: 8, length: 120 * time.Second}, false},
		{simScenario{name: "(g) 30 pods, above the allowance per second", initial: 30, length: 120 * time.Second}, true},
	} {
		for seed := range uint64(5) {
			r := simulate(sc.simScenario, seed, fleetBudget)[0]
			for s, v := range r.retries {
				if v > simTolerance {
					t.Errorf("%s, seed %d: %d retries in second %d, above %d", sc.name, seed, v, s, simTolerance)
				}
			}
			if m := mean(r.retries[60:]); sc.starves != (m == 0) {
				t.Errorf("%s, seed %d: a mean of %.1f retries/s once counted", sc.name, seed, m)
			}
			if seed == 0 {
				row(sc.name, r)
			}
		}
	}
	t.Logf("retries/s per scenario (virtual seconds; offered = primaries + retries per second):\n%s", table.String())
}
