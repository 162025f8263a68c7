package budget_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
	"github.com/retryguard/retryguard/runtime/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
)

// onePolicy serves one policy's current payload, as a watcher would.
type onePolicy struct{ current *policyconfig.Payload }

func (o *onePolicy) Policy(name string) (*policyconfig.Payload, bool) {
	return o.current, name == o.current.Policy.Name
}

// An Executor enforces the fleet share as payloads arrive, with nothing
// but the payloads to tell it: a count taken before the process started
// allows no retry, a new payload with a count that includes the pod gives
// it its share, and the share falls back to the stale one with no payload
// at all. Its budget registry starts with the executor.
func TestAnExecutorEnforcesTheFleetShareAsPayloadsArrive(t *testing.T) {
	t0 := time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)
	clk := clock.NewVirtual(t0)
	limit := int32(20)
	p := fixtures.SMS()
	p.Budget.Partitions, p.Budget.MinRetriesPerSecond, p.Budget.MaxRetriesPerSecond = 20, 20, &limit
	p.Budget.Consumers = &policyconfig.Consumers{Count: 1, ObservedAt: t0.Add(-time.Second)}
	src := &onePolicy{p}
	ex := retry.New(src, retry.WithClock(clk))
	do := func() (int, error) {
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
	if calls, err := do(); calls != 1 || !denied(err, budget.NoShare) {
		t.Fatalf("a count from before the process started: %d attempts, %v", calls, err)
	}

	covering := *p
	b := *p.Budget
	b.Consumers = &policyconfig.Consumers{Count: 1, ObservedAt: clk.Now()}
	covering.Budget = &b
	src.current = &covering
	clk.Advance(time.Second) // rate credit comes with the next second
	if calls, err := do(); calls != 3 {
		t.Fatalf("a count that includes the pod, N = 1: %d attempts (%v), want all 3", calls, err)
	}

	clk.Advance(b.Consumers.ObservedAt.Add(policyconfig.ConsumerCountStaleAfter + time.Second).Truncate(time.Second).Sub(clk.Now()))
	granted := 0
	for range 5 {
		calls, _ := do()
		granted += calls - 1
	}
	elapsed := clk.Now().Sub(b.Consumers.ObservedAt.Add(policyconfig.ConsumerCountStaleAfter))
	t.Logf("stale: %d retries in %v", granted, elapsed)
	if most := int(elapsed/time.Second) + 1; granted == 0 || granted > most {
		t.Fatalf("stale, 20/s over max(P=20, N=1): %d retries in %v, want 1 to %d", granted, elapsed, most)
	}
}
