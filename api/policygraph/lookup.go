package policygraph

import (
	"context"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// StaticLookup is a Lookup over a fixed set of policies and namespaces, for
// tests and offline tools. It is a linear scan; use it for tables, not for
// benchmarks of scale. Copies share their contents. It is not safe for
// concurrent use while WithNamespace adds to it.
type StaticLookup struct {
	policies   map[types.NamespacedName]v1.RetryPolicy
	budgets    map[types.NamespacedName]v1.RetryBudget
	namespaces map[string]map[string]string
}

var _ Lookup = StaticLookup{}

// NewStaticLookup indexes policies by namespace and name.
func NewStaticLookup(policies ...v1.RetryPolicy) StaticLookup {
	s := StaticLookup{policies: map[types.NamespacedName]v1.RetryPolicy{}, budgets: map[types.NamespacedName]v1.RetryBudget{},
		namespaces: map[string]map[string]string{}}
	for _, p := range policies {
		s.policies[keyOf(&p)] = p
	}
	return s
}

// WithNamespace records a namespace and its labels.
func (s StaticLookup) WithNamespace(name string, labels map[string]string) StaticLookup {
	s.namespaces[name] = maps.Clone(labels)
	return s
}

// WithBudget records budgets.
func (s StaticLookup) WithBudget(budgets ...v1.RetryBudget) StaticLookup {
	for _, b := range budgets {
		s.budgets[types.NamespacedName{Namespace: b.Namespace, Name: b.Name}] = *b.DeepCopy()
	}
	return s
}

// Budget returns a copy of the budget, or nil.
func (s StaticLookup) Budget(_ context.Context, key types.NamespacedName) (*v1.RetryBudget, error) {
	b, ok := s.budgets[key]
	if !ok {
		return nil, nil
	}
	return b.DeepCopy(), nil
}

// Get returns a copy of the policy, or nil.
func (s StaticLookup) Get(_ context.Context, key types.NamespacedName) (*v1.RetryPolicy, error) {
	p, ok := s.policies[key]
	if !ok {
		return nil, nil
	}
	return p.DeepCopy(), nil
}

func (s StaticLookup) where(keep func(*v1.RetryPolicy) bool) []v1.RetryPolicy {
	var out []v1.RetryPolicy
	for _, p := range s.policies {
		if keep(&p) {
			out = append(out, *p.DeepCopy())
		}
	}
	slices.SortFunc(out, func(a, b v1.RetryPolicy) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// Children lists the policies, in every namespace, whose parentRef names parent.
func (s StaticLookup) Children(_ context.Context, parent types.NamespacedName) ([]v1.RetryPolicy, error) {
	return s.where(func(p *v1.RetryPolicy) bool {
		key, ok := ParentKey(p)
		return ok && key == parent
	}), nil
}

// PoolUsers lists the policies of namespace that use the pool.
func (s StaticLookup) PoolUsers(_ context.Context, namespace, pool string) ([]v1.RetryPolicy, error) {
	return s.where(func(p *v1.RetryPolicy) bool {
		return p.Namespace == namespace && p.Spec.ConnectionPool != nil && p.Spec.ConnectionPool.Name == pool
	}), nil
}

// BudgetUsers lists the policies, in every namespace, of one criticality
// that draw on the budget.
func (s StaticLookup) BudgetUsers(_ context.Context, budget types.NamespacedName, crit v1.Criticality) ([]v1.RetryPolicy, error) {
	return s.where(func(p *v1.RetryPolicy) bool {
		key, ok := BudgetKeyOf(p)
		return ok && key == budget && CriticalityOf(p) == crit
	}), nil
}

// NamespaceLabels returns the labels recorded with WithNamespace.
func (s StaticLookup) NamespaceLabels(_ context.Context, namespace string) (map[string]string, bool, error) {
	l, ok := s.namespaces[namespace]
	return maps.Clone(l), ok, nil
}
