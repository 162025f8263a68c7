// Package policyindex reads RetryPolicies for api/policygraph through a
// controller-runtime cache: the field indexes the webhooks and the
// controllers share, and CacheLookup, the policygraph.Lookup over them. It is
// apart from policygraph so that the rules themselves depend on nothing but
// the API types.
package policyindex

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Field indexes on RetryPolicy, registered once with the manager's cache and
// shared by the webhooks and the controllers.
const (
	IndexParentRef      = "spec.layer.parentRef.name"
	IndexConnectionPool = "spec.connectionPool.name"
	IndexBudgetRef      = "spec.budgetRef.name"
	// IndexBudgetCriticality keys a policy by "budget/criticality", so that
	// admission lists only the users of a budget that would clash.
	IndexBudgetCriticality = "spec.budgetRef.name/criticality"
)

func budgetCriticalityKey(budget string, c v1.Criticality) string { return budget + "/" + string(c) }

// IndexFuncs returns the extractor of each RetryPolicy field index.
func IndexFuncs() map[string]client.IndexerFunc {
	by := func(extract func(*v1.RetryPolicy) string) client.IndexerFunc {
		return func(o client.Object) []string {
			if v := extract(o.(*v1.RetryPolicy)); v != "" {
				return []string{v}
			}
			return nil
		}
	}
	return map[string]client.IndexerFunc{
		IndexParentRef: by(func(p *v1.RetryPolicy) string {
			if p.Spec.Layer.ParentRef == nil {
				return ""
			}
			return p.Spec.Layer.ParentRef.Name
		}),
		IndexConnectionPool: by(func(p *v1.RetryPolicy) string {
			if p.Spec.ConnectionPool == nil {
				return ""
			}
			return p.Spec.ConnectionPool.Name
		}),
		IndexBudgetRef: by(func(p *v1.RetryPolicy) string {
			if p.Spec.BudgetRef == nil {
				return ""
			}
			return p.Spec.BudgetRef.Name
		}),
		IndexBudgetCriticality: by(func(p *v1.RetryPolicy) string {
			if p.Spec.BudgetRef == nil {
				return ""
			}
			return budgetCriticalityKey(p.Spec.BudgetRef.Name, policygraph.CriticalityOf(p))
		}),
	}
}

// RegisterIndexes adds the RetryPolicy field indexes to a cache.
func RegisterIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	for field, fn := range IndexFuncs() {
		if err := indexer.IndexField(ctx, &v1.RetryPolicy{}, field, fn); err != nil {
			return err
		}
	}
	return nil
}

// CacheLookup reads one namespace through a client.Reader whose cache has
// the indexes from RegisterIndexes.
type CacheLookup struct {
	Reader    client.Reader
	Namespace string
}

var _ policygraph.Lookup = CacheLookup{}

// Get returns the named policy, or nil when it does not exist.
func (c CacheLookup) Get(ctx context.Context, name string) (*v1.RetryPolicy, error) {
	var p v1.RetryPolicy
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func (c CacheLookup) by(ctx context.Context, index, value string) ([]v1.RetryPolicy, error) {
	var list v1.RetryPolicyList
	if err := c.Reader.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingFields{index: value}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Children lists the policies whose parentRef names parent.
func (c CacheLookup) Children(ctx context.Context, parent string) ([]v1.RetryPolicy, error) {
	return c.by(ctx, IndexParentRef, parent)
}

// PoolUsers lists the policies that use the connection pool.
func (c CacheLookup) PoolUsers(ctx context.Context, pool string) ([]v1.RetryPolicy, error) {
	return c.by(ctx, IndexConnectionPool, pool)
}

// BudgetUsers lists the policies of one criticality that draw on the budget.
func (c CacheLookup) BudgetUsers(ctx context.Context, budget string, crit v1.Criticality) ([]v1.RetryPolicy, error) {
	return c.by(ctx, IndexBudgetCriticality, budgetCriticalityKey(budget, crit))
}
