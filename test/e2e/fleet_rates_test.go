package e2e

import (
	"container/heap"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
)

// The fleet spec's load, replayed on a virtual clock against the runtime's
// own budgets (one budget.Registry a pod, the payload the controller builds
// from testdata/fleet-budget.yaml, a count naming the fleetReplicas pods),
// and counted as the spec counts it: by the second a retry reached the
// vendor (ratesOf). The dependency answers 503; each hop takes fleetSimHop
// and each backoff its policy's cap, the latest a granted retry can leave.
// It needs no cluster: `go test -run TestFleetRates .` in test/e2e.

// fleetSimHop is one leg of a call (the suite to a pod, a pod to the
// vendor, an answer back) on a loaded node.
const fleetSimHop = 5 * time.Millisecond

// fleetSim is one replayed load: the retries the pods' budgets granted in
// each second of their clock, and what the vendor logged.
type fleetSim struct {
	granted     map[int64]int // by second of the pods' clock
	attempts    []FleetAttempt
	start, stop time.Time
}

// fleetObjects are the spec's budget and policy.
func fleetObjects(t *testing.T) (*policyv1alpha1.RetryBudget, *policyv1alpha1.RetryPolicy) {
	t.Helper()
	objs, err := readObjects(filepath.Join("testdata", "fleet-budget.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, p := &policyv1alpha1.RetryBudget{}, &policyv1alpha1.RetryPolicy{}
	for _, o := range objs {
		into := map[string]any{"RetryBudget": b, "RetryPolicy": p}[o.GetKind()]
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	b.UID, b.Generation = "uid-fleet", 1
	return b, p
}

// replayFleet runs driveFleet's load through fleetReplicas pods, beginning
// at start, each pod's budget created long before (at its start, as the
// spec's pods are) and its share covered, as awaitShares waits for.
func replayFleet(t *testing.T, start time.Time) fleetSim {
	t.Helper()
	rb, rp := fleetObjects(t)
	payload := controllers.BuildPayload(rp, rb, int64(rp.Spec.MaxAttempts), policyconfig.Enforcement{Mode: policyconfig.Enforced})
	pol := payload.Policy
	clk := clock.NewFake(start.Add(-15 * time.Second))
	uids := make([]string, fleetReplicas)
	for i := range uids {
		uids[i] = fmt.Sprintf("%s-pod-%d-%d", t.Name(), start.UnixNano(), i)
	}
	b := *payload.Budget
	b.Consumers = &policyconfig.Consumers{Count: fleetReplicas, ObservedAt: clk.Now(), Members: policyconfig.EncodeMembers(uids)}
	budgets := make([]*budget.Budget, fleetReplicas)
	for i, uid := range uids {
		reg := budget.NewRegistry(clk, budget.WithPod(uid), budget.WithDelivery(policyconfig.ConsumerCountDelivery),
			budget.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		bud, err := reg.Resolve(appNamespace, &b)
		if err != nil {
			t.Fatal(err)
		}
		budgets[i] = bud
	}
	clk.Set(start.Add(-time.Second))
	for i, bud := range budgets {
		if d := bud.Denominator(); d != fleetReplicas {
			t.Fatalf("pod %d: D %d before the load, want %d", i, d, fleetReplicas)
		}
	}

	var queue events
	end := start.Add(fleetLoadFor)
	for pod := range fleetReplicas {
		for w := range fleetWorkers {
			for i, at := 0, start; at.Before(end); i, at = i+1, at.Add(fleetSendEvery) {
				heap.Push(&queue, event{at: at.Add(2 * fleetSimHop), pod: pod, n: 1, key: fmt.Sprintf("%d-%d-%d", pod, w, i)})
			}
		}
	}
	sim := fleetSim{granted: map[int64]int{}, start: start, stop: end}
	seen := map[string]bool{}
	for len(queue) > 0 {
		e := heap.Pop(&queue).(event)
		clk.Set(e.at)
		bud := budgets[e.pod]
		switch {
		case !e.answered:
			if e.n == 1 {
				bud.PrimaryAt(e.at.Add(-fleetSimHop)) // the pod counts it as it sends it
			}
			sim.attempts = append(sim.attempts, FleetAttempt{Attempt: Attempt{Key: e.key, Status: 503}, At: e.at, Retry: seen[e.key]})
			seen[e.key] = true
			e.answered, e.at = true, e.at.Add(fleetSimHop)
			heap.Push(&queue, e)
		case e.n < int(pol.MaxAttempts) && bud.TryRetry() == budget.Allowed:
			sim.granted[e.at.Unix()]++
			e.answered, e.n, e.at = false, e.n+1, e.at.Add(pol.Backoff.Cap.D()+fleetSimHop)
			heap.Push(&queue, e)
		default:
			// The operation ends; its send returns to the suite a hop later
			// (the workers stop at end, their last tick).
			sim.stop = maxTime(sim.stop, e.at.Add(fleetSimHop))
		}
	}
	return sim
}

// An event is one operation's next step: its attempt n reaching the
// vendor at at, or (answered) its 503 reaching the pod.
type event struct {
	at       time.Time
	pod, n   int
	key      string
	answered bool
}

// events is a heap of events, the earliest first.
type events []event

func (q events) Len() int           { return len(q) }
func (q events) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q events) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)        { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestFleetRatesCountEachSecondsGrantsOnce: the fleet spec failed once
// with [16 0 8 8 8 8 8 8 8] at the vendor, its load begun 26 ms before a
// second, while the runtime held the fleet to its allowance in every second
// of the pods' clock. Replayed from that start, the pods grant at most 8 in
// every second, and the vendor's first counted second holds 16: the 8 the
// pods granted in the load's partial first second, arriving a backoff and
// the hops later, and that second's own 8. Begun where the spec now begins
// a load (untilLoadStart), at every millisecond of a second, the vendor's
// count of every second stays within the allowance.
func TestFleetRatesCountEachSecondsGrantsOnce(t *testing.T) {
	second := time.Date(2026, 12, 1, 12, 4, 15, 0, time.UTC)
	checkGrants := func(t *testing.T, sim fleetSim) {
		t.Helper()
		for sec, n := range sim.granted {
			if n > fleetAllowance {
				t.Errorf("the pods granted %d retries in second %s, over the allowance %d", n, time.Unix(sec, 0).UTC().Format(time.TimeOnly), fleetAllowance)
			}
		}
	}

	t.Run("the failed run's start", func(t *testing.T) {
		start := second.Add(974 * time.Millisecond)
		sim := replayFleet(t, start)
		checkGrants(t, sim)
		// As the spec counted before: from the first whole second.
		old := ratesOf(sim.attempts, start.Add(time.Second), sim.stop)
		t.Logf("the vendor, counting from the first whole second: %s", old)
		if got := old.perSecond[0]; got != 2*fleetAllowance {
			t.Errorf("the vendor's first whole second: %d retries, want %d (the partial second's grants and its own): %s", got, 2*fleetAllowance, old)
		}
		if d := untilLoadStart(start); d != 26*time.Millisecond {
			t.Errorf("a load that may begin %s into a second waits %s, want until the next second", start.Sub(second), d)
		}
	})

	t.Run("every start the spec allows", func(t *testing.T) {
		for ms := range 1000 {
			may := second.Add(time.Duration(ms) * time.Millisecond)
			if into := may.Add(untilLoadStart(may)).Sub(second); into != time.Duration(ms)*time.Millisecond && into != time.Second {
				t.Fatalf("a load that may begin %dms into a second begins %s after the second", ms, into)
			}
		}
		// So a load begins in the first loadStartWithin of a second.
		for into := time.Duration(0); into < loadStartWithin; into += 5 * time.Millisecond {
			start := second.Add(into)
			sim := replayFleet(t, start)
			checkGrants(t, sim)
			r := ratesOf(sim.attempts, start, sim.stop)
			if r.max() > fleetAllowance || len(r.perSecond) != int(fleetLoadFor/time.Second) {
				t.Errorf("a load begun at %s: the vendor saw %s, want at most %d a second over %d s",
					start.Format(time.TimeOnly+".000"), r, fleetAllowance, fleetLoadFor/time.Second)
			}
		}
	})
}
