package budget_test

import (
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
)

// A payload of a counted budget carries no count: the count is the
// budget's own ConfigMap's, joined by the watcher. Until a count of the
// budget's UID is joined, or when the one joined is withdrawn, the pod
// holds no share: never the allowance over partitions, which would let a
// fleet that outgrew partitions grant more than the allowance (RG-LOAD:
// "define behavior when budget coordination fails").
func TestCountedBudgetWithoutACountHoldsNoShare(t *testing.T) {
	clk := clock.NewFake(fleetT0)
	pod := newFleetPod("pod-a", clk)
	counted := namedFleet("uid-1", 1, fleetT0, "pod-a")
	counted.Counted, counted.Consumers = true, nil
	if d := budget.Denominator(budget.ConfigOf(counted, "pod-a"), fleetT0); d != budget.ZeroShare {
		t.Fatalf("a counted budget without a count: denominator %d, want no share", d)
	}
	pod.resolve(counted)
	if n := pod.grantsNow(); n != 0 {
		t.Fatalf("no count joined yet: %d retries granted, want 0", n)
	}
	// The count joined (policyconfig.Payload.Join): the pod's share.
	payload := &policyconfig.Payload{Policy: policyconfig.Policy{Namespace: "shop"}, Budget: counted}
	joined := payload.Join(&policyconfig.Count{Namespace: "shop", Budget: "payments", UID: "uid-1",
		Consumers: *namedFleet("uid-1", 1, fleetT0, "pod-a").Consumers})
	pod.resolve(joined.Budget)
	clk.Advance(policyconfig.ConsumerCountDelivery + time.Second)
	if n := pod.grantsNow(); n != 20 {
		t.Fatalf("the only pod counted: %d retries granted, want the allowance, 20", n)
	}
	// Its count withdrawn (the ConfigMap deleted): the last count is kept
	// until it goes stale, then nothing.
	pod.resolve(payload.Join(nil).Budget)
	clk.Advance(policyconfig.ConsumerCountStaleAfter)
	if n := pod.grantsNow(); n != 0 {
		t.Fatalf("a stale count: %d retries granted, want 0", n)
	}
}
