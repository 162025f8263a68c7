package budget_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
)

// onePolicy serves one policy's current payload, as a watcher would.
type onePolicy struct{ current *policyconfig.Payload }

func (o *onePolicy) Policy(name string) (*policyconfig.Payload, bool) {
	return o.current, name == o.current.Policy.Name
}

// slowSource is a Source that states how late it may deliver a payload,
// as a mounted volume would.
type slowSource struct{ *onePolicy }

func (slowSource) DeliveryBound() time.Duration { return 90 * time.Second }

// promptSource states the delivery bound, as the informer does.
type promptSource struct{ *onePolicy }

func (promptSource) DeliveryBound() time.Duration { return policyconfig.ConsumerCountDelivery }

// An Executor enforces the fleet share as payloads arrive, with nothing
// but the payloads to tell it: a count that does not name the pod allows no
// retry, a new payload with a count that names it gives it its share after
// the delivery bound, and the share falls to zero once the count is stale,
// with no payload at all. A Source that delivers later than the bound, or
// states no bound, gets no share of the counted budget, and says so in
// every refusal.
func TestAnExecutorEnforcesTheFleetShareAsPayloadsArrive(t *testing.T) {
	const pod = "pod-uid-7"
	t0 := time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)
	clk := clock.NewVirtual(t0)
	limit := int32(20)
	p := fixtures.SMS()
	p.Budget.Partitions, p.Budget.MinRetriesPerSecond, p.Budget.MaxRetriesPerSecond = 20, 20, &limit
	p.Budget.Consumers = &policyconfig.Consumers{Count: 1, ObservedAt: t0, Members: policyconfig.EncodeMembers([]string{"another-pod"})}
	src := &onePolicy{p}
	ex := retry.New(src, retry.WithClock(clk), retry.WithBudgets(budget.NewRegistry(clk, budget.WithPod(pod))))
	do := func(ex *retry.Executor) (int, error) {
		calls := 0
		err := ex.Do(context.Background(), p.Policy.Name, retry.Vars{"user_id": "42", "login_session_id": "s-9"},
			func(context.Context, retry.Attempt) error {
				calls++
				return retry.Status(503, "")
			})
		return calls, err
	}
	denied := func(err error, why budget.Denial) bool {
		var re *retry.Error
		return errors.As(err, &re) && re.State == retry.BudgetExhausted && strings.Contains(re.Detail, "("+string(why)+")")
	}

	clk.Advance(2 * time.Second)
	if calls, err := do(ex); calls != 1 || !denied(err, budget.NoShare) {
		t.Fatalf("a count that does not name the pod: %d attempts, %v", calls, err)
	}

	naming := *p
	b := *p.Budget
	b.Consumers = &policyconfig.Consumers{Count: 1, ObservedAt: clk.Now(), Members: policyconfig.EncodeMembers([]string{pod})}
	naming.Budget = &b
	src.current = &naming
	if calls, err := do(ex); calls != 1 || !denied(err, budget.NoShare) {
		t.Fatalf("a count that names the pod, within the delivery bound: %d attempts, %v", calls, err)
	}
	clk.Advance(policyconfig.ConsumerCountDelivery + time.Second) // and rate credit comes with the next second
	if calls, err := do(ex); calls != 3 {
		t.Fatalf("a count that names the pod, N = 1: %d attempts (%v), want all 3", calls, err)
	}

	clk.Advance(b.Consumers.ObservedAt.Add(policyconfig.ConsumerCountStaleAfter + time.Second).Truncate(time.Second).Sub(clk.Now()))
	granted := 0
	for range 5 {
		calls, _ := do(ex)
		granted += calls - 1
	}
	elapsed := clk.Now().Sub(b.Consumers.ObservedAt.Add(policyconfig.ConsumerCountStaleAfter))
	t.Logf("stale: %d retries in %v", granted, elapsed)
	if granted != 0 {
		t.Fatalf("stale: %d retries in %v, want none: a stale count gives no share", granted, elapsed)
	}

	// The same payload through a source that states the kubelet's delay.
	t.Setenv(budget.PodUIDEnv, pod)
	b.Consumers.ObservedAt = clk.Now()
	for _, s := range []retry.Source{slowSource{src}, src} {
		slow := retry.New(s, retry.WithClock(clk))
		for range 3 {
			clk.Advance(policyconfig.ConsumerCountDelivery)
			if calls, err := do(slow); calls != 1 || !denied(err, budget.SlowDelivery) {
				t.Fatalf("through a source that states %T's bound: %d attempts, %v", s, calls, err)
			}
		}
	}
	fast := retry.New(promptSource{src}, retry.WithClock(clk)) // its pod from $POD_UID
	do(fast)
	clk.Advance(policyconfig.ConsumerCountDelivery + time.Second)
	if calls, err := do(fast); calls != 3 {
		t.Fatalf("the same payload through a prompt source, the pod named by $%s: %d attempts (%v)", budget.PodUIDEnv, calls, err)
	}
}
