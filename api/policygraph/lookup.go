package policygraph

import (
	"context"
	"slices"
	"strings"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// StaticLookup is a Lookup over a fixed set of policies, for tests. It is a
// linear scan; use it for tables, not for benchmarks of scale.
type StaticLookup map[string]v1.RetryPolicy

var _ Lookup = StaticLookup{}

// NewStaticLookup indexes policies by name.
func NewStaticLookup(policies ...v1.RetryPolicy) StaticLookup {
	s := StaticLookup{}
	for _, p := range policies {
		s[p.Name] = p
	}
	return s
}

// Get returns a copy of the named policy, or nil.
func (s StaticLookup) Get(_ context.Context, name string) (*v1.RetryPolicy, error) {
	p, ok := s[name]
	if !ok {
		return nil, nil
	}
	return p.DeepCopy(), nil
}

func (s StaticLookup) where(keep func(*v1.RetryPolicy) bool) []v1.RetryPolicy {
	var out []v1.RetryPolicy
	for _, p := range s {
		if keep(&p) {
			out = append(out, *p.DeepCopy())
		}
	}
	slices.SortFunc(out, func(a, b v1.RetryPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Children lists the policies whose parentRef names parent.
func (s StaticLookup) Children(_ context.Context, parent string) ([]v1.RetryPolicy, error) {
	return s.where(func(p *v1.RetryPolicy) bool {
		return p.Spec.Layer.ParentRef != nil && p.Spec.Layer.ParentRef.Name == parent
	}), nil
}

// PoolUsers lists the policies that use the pool.
func (s StaticLookup) PoolUsers(_ context.Context, pool string) ([]v1.RetryPolicy, error) {
	return s.where(func(p *v1.RetryPolicy) bool {
		return p.Spec.ConnectionPool != nil && p.Spec.ConnectionPool.Name == pool
	}), nil
}

// BudgetUsers lists the policies of one criticality that draw on the budget.
func (s StaticLookup) BudgetUsers(_ context.Context, budget string, crit v1.Criticality) ([]v1.RetryPolicy, error) {
	return s.where(func(p *v1.RetryPolicy) bool {
		return p.Spec.BudgetRef != nil && p.Spec.BudgetRef.Name == budget && CriticalityOf(p) == crit
	}), nil
}
