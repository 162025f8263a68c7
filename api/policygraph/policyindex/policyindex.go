// Package policyindex reads RetryPolicies for api/policygraph through a
// controller-runtime cache: the field indexes the webhooks and the
// controllers share, and CacheLookup, the policygraph.Lookup over them. It is
// apart from policygraph so that the rules themselves depend on nothing but
// the API types.
package policyindex

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Field indexes on RetryPolicy, registered once with the manager's cache and
// shared by the webhooks and the controllers.
const (
	// IndexParentRef keys a policy by its parent's "namespace/name" (the
	// namespace defaulted to the policy's own), so that Children lists a
	// parent's children in every namespace: the cache also keys each value
	// under all namespaces, and a List without InNamespace reads that key.
	IndexParentRef      = "spec.layer.parentRef"
	IndexConnectionPool = "spec.connectionPool.name"
	// IndexBudgetRef keys a policy by its budget's "namespace/name"
	// (BudgetRefKey), so that a List without InNamespace finds a budget's
	// users in every namespace it is shared with.
	IndexBudgetRef = "spec.budgetRef"
	// IndexBudgetCriticality keys a policy by "namespace/budget/criticality", so that
	// admission lists only the users of a budget that would clash.
	IndexBudgetCriticality = "spec.budgetRef/criticality"
)

// IndexSharedBudget keys a RetryBudget shared with other namespaces by its
// consumers.namespaces.from (SharedByAll, SharedBySelector), so that a pod
// or namespace event reads the budgets of its own namespace and the shared
// ones, never every budget of the cluster.
const IndexSharedBudget = "spec.consumers.namespaces.from"

// The IndexSharedBudget values.
const (
	SharedByAll      = string(v1.NamespacesFromAll)
	SharedBySelector = string(v1.NamespacesFromSelector)
)

// BudgetRefKey is the IndexBudgetRef value of the users of budget.
func BudgetRefKey(budget types.NamespacedName) string { return budget.String() }

// ParentRefKey is the IndexParentRef value of the children of parent.
func ParentRefKey(parent types.NamespacedName) string { return parent.String() }

func budgetCriticalityKey(budget types.NamespacedName, c v1.Criticality) string {
	return BudgetRefKey(budget) + "/" + string(c)
}

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
			if key, ok := policygraph.ParentKey(p); ok {
				return ParentRefKey(key)
			}
			return ""
		}),
		IndexConnectionPool: by(func(p *v1.RetryPolicy) string {
			if p.Spec.ConnectionPool == nil {
				return ""
			}
			return p.Spec.ConnectionPool.Name
		}),
		IndexBudgetRef: by(func(p *v1.RetryPolicy) string {
			if key, ok := policygraph.BudgetKeyOf(p); ok {
				return BudgetRefKey(key)
			}
			return ""
		}),
		IndexBudgetCriticality: by(func(p *v1.RetryPolicy) string {
			if key, ok := policygraph.BudgetKeyOf(p); ok {
				return budgetCriticalityKey(key, policygraph.CriticalityOf(p))
			}
			return ""
		}),
	}
}

// sharedBudgetIndex is IndexSharedBudget's extractor: a budget whose
// consumers.namespaces admits other namespaces, by its from.
func sharedBudgetIndex(o client.Object) []string {
	switch from := policygraph.ConsumersFrom(o.(*v1.RetryBudget)); from {
	case v1.NamespacesFromAll, v1.NamespacesFromSelector:
		return []string{string(from)}
	}
	return nil
}

// RegisterIndexes adds the RetryPolicy field indexes, and the RetryBudget
// one, to a cache.
func RegisterIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	for field, fn := range IndexFuncs() {
		if err := indexer.IndexField(ctx, &v1.RetryPolicy{}, field, fn); err != nil {
			return err
		}
	}
	return indexer.IndexField(ctx, &v1.RetryBudget{}, IndexSharedBudget, sharedBudgetIndex)
}

// CacheLookup reads through a client.Reader whose cache has the indexes
// from RegisterIndexes. The policies its lists return are shared with the
// cache and must not be modified. Namespaces are read as metadata only, from the same
// informer as the controller's metadata watch of Namespaces. It is safe for
// concurrent use when its Reader is.
type CacheLookup struct {
	Reader client.Reader
	// children is the RetryPolicy informer's store, with the
	// indexChildren index, when NewIndexedLookup could reach it; synced
	// reports whether it holds every policy yet.
	children toolscache.Indexer
	synced   func() bool
	// memo keeps walks below a policy until the store changes: the
	// children index function starts a new generation on every change.
	memo *policygraph.Memo
}

var (
	_ policygraph.Lookup       = CacheLookup{}
	_ policygraph.ChildVisitor = CacheLookup{}
	_ policygraph.Memoizing    = CacheLookup{}
)

// Memo is the lookup's Memo, nil (none) unless NewIndexedLookup added the
// children index.
func (c CacheLookup) Memo() *policygraph.Memo { return c.memo }

// indexChildren is the informer index NewIndexedLookup adds: a policy
// under its parent's ParentRefKey, in every namespace.
const indexChildren = "retryguard.io/children"

// NewIndexedLookup is a CacheLookup over c that also reads children in
// place: it adds an index to the RetryPolicy informer's own store and
// visits a parent's children there, so that a review neither copies them
// nor builds a list per descendant (controller-runtime's List copies each
// item into the list it returns, by reflection, even with
// UnsafeDisableDeepCopy). It keeps the worst chain below a policy between
// reviews until a stored policy changes (policygraph.Memo). Until the informer has synced, and where c's
// informer is not a client-go SharedIndexInformer, children are listed
// through c as CacheLookup does. Call it before the cache starts.
func NewIndexedLookup(ctx context.Context, c cache.Cache) (CacheLookup, error) {
	lk := CacheLookup{Reader: c}
	inf, err := c.GetInformer(ctx, &v1.RetryPolicy{}, cache.BlockUntilSynced(false))
	if err != nil {
		return lk, err
	}
	store, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return lk, nil
	}
	if _, added := store.GetIndexer().GetIndexers()[indexChildren]; added { // a second lookup over the same cache
		lk.children, lk.synced = store.GetIndexer(), inf.HasSynced
		return lk, nil
	}
	memo := &policygraph.Memo{}
	err = inf.AddIndexers(toolscache.Indexers{indexChildren: func(obj any) ([]string, error) {
		// The store calls its index functions under its lock, before a
		// change is visible to any reader: the memo's generation moves first.
		memo.Changed()
		if p, ok := obj.(*v1.RetryPolicy); ok {
			if key, ok := policygraph.ParentKey(p); ok {
				return []string{ParentRefKey(key)}, nil
			}
		}
		return nil, nil
	}})
	if err != nil {
		return lk, err
	}
	lk.children, lk.synced, lk.memo = store.GetIndexer(), inf.HasSynced, memo
	return lk, nil
}

// VisitChildren visits the policies, in every namespace, whose parentRef
// names parent, in the informer's store once NewIndexedLookup reached it
// and it has synced (in is false otherwise): each is the cache's own
// object, which visit only reads.
func (c CacheLookup) VisitChildren(_ context.Context, parent types.NamespacedName, visit func(*v1.RetryPolicy) error) (in bool, err error) {
	if c.children == nil || !c.synced() {
		return false, nil
	}
	objs, err := c.children.ByIndex(indexChildren, ParentRefKey(parent))
	if err != nil {
		return true, err
	}
	for _, o := range objs {
		if p, ok := o.(*v1.RetryPolicy); ok {
			if err := visit(p); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// Get returns the policy, or nil when it does not exist.
func (c CacheLookup) Get(ctx context.Context, key types.NamespacedName) (*v1.RetryPolicy, error) {
	var p v1.RetryPolicy
	err := c.Reader.Get(ctx, key, &p)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// by lists the policies whose index holds value. The items are the cache's
// own, not copies: the rules only read them, and a parent with 10,000
// children would otherwise cost every admission of it 10,000 deep copies
// (docs/security.md, bounded admission work). A Reader that is not a cache
// ignores the option.
func (c CacheLookup) by(ctx context.Context, index, value string, opts ...client.ListOption) ([]v1.RetryPolicy, error) {
	var list v1.RetryPolicyList
	if err := c.Reader.List(ctx, &list, append(opts, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy)...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Children lists the policies, in every namespace, whose parentRef names parent.
func (c CacheLookup) Children(ctx context.Context, parent types.NamespacedName) ([]v1.RetryPolicy, error) {
	return c.by(ctx, IndexParentRef, ParentRefKey(parent))
}

// PoolUsers lists the policies of namespace that use the connection pool.
func (c CacheLookup) PoolUsers(ctx context.Context, namespace, pool string) ([]v1.RetryPolicy, error) {
	return c.by(ctx, IndexConnectionPool, pool, client.InNamespace(namespace))
}

// BudgetUsers lists the policies, in every namespace, of one criticality
// that draw on the budget.
func (c CacheLookup) BudgetUsers(ctx context.Context, budget types.NamespacedName, crit v1.Criticality) ([]v1.RetryPolicy, error) {
	return c.by(ctx, IndexBudgetCriticality, budgetCriticalityKey(budget, crit))
}

// Budget reads one RetryBudget; nil when it does not exist.
func (c CacheLookup) Budget(ctx context.Context, key types.NamespacedName) (*v1.RetryBudget, error) {
	var b v1.RetryBudget
	switch err := c.Reader.Get(ctx, key, &b); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &b, nil
}

// NamespaceMetadata is an empty metadata-only Namespace, as the cache and
// the controller's watch read Namespaces.
func NamespaceMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// NamespaceLabels reads a namespace's labels; found is false when the
// reader does not know the namespace.
func (c CacheLookup) NamespaceLabels(ctx context.Context, namespace string) (map[string]string, bool, error) {
	m := NamespaceMetadata()
	err := c.Reader.Get(ctx, client.ObjectKey{Name: namespace}, m)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m.Labels, true, nil
}
