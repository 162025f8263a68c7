package policygraph

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// maxMemoEntries bounds a Memo: a caller that sends reviews of ever new
// policies fills it, and it starts afresh, costing each review one walk.
const maxMemoEntries = 4096

// Memo keeps the walk below a policy between analyses, for one generation
// of the stored policies: the worst descendant chain of a parent with
// 10,000 children is then found once, not once per review (docs/webhooks.md,
// bounded work). Changed must be called before any change to the stored
// policies becomes visible to the Lookup that offers the Memo (the
// manager's calls it from an index function of the informer's store,
// which runs under the store's lock), so that a walk that read the store
// after any change is never taken for a later one. A walk that read a
// namespace's labels (a Selector's consent) is not kept: labels change
// without a policy changing. It is safe for concurrent use; its zero value
// is empty and ready.
type Memo struct {
	gen     atomic.Uint64
	mu      sync.Mutex
	entries map[memoKey]memoEntry
}

// Memoizing is implemented by a Lookup that offers a Memo.
type Memoizing interface {
	Memo() *Memo
}

// Changed starts a new generation: every walk kept so far is forgotten.
func (m *Memo) Changed() {
	m.gen.Add(1)
	m.mu.Lock()
	clear(m.entries)
	m.mu.Unlock()
}

// memoKey is what the walk below a policy depends on besides the store:
// the policy, its depth (TooDeep) and the consent it gives its children.
type memoKey struct {
	parent   types.NamespacedName
	depth    int
	from     v1.FromNamespaces
	selector string
}

type memoEntry struct {
	gen         uint64
	descendants Chain
	tooDeep     bool
	unpermitted []types.NamespacedName
}

func memoKeyOf(p *v1.RetryPolicy, depth int) memoKey {
	k := memoKey{parent: keyOf(p), depth: depth, from: FromOf(p)}
	if k.from == v1.NamespacesFromSelector {
		k.selector = metav1.FormatLabelSelector(p.Spec.Layer.AllowedChildren.Namespaces.Selector)
	}
	return k
}

// descendantsOf is worstDescendants of p at depth, through m when lk offers
// one. The chains it returns are shared between analyses and read-only.
func descendantsOf(ctx context.Context, lk Lookup, consent *consent, p *v1.RetryPolicy,
	onPath map[types.NamespacedName]bool, depth int) (Chain, bool, []types.NamespacedName, error) {
	mz, ok := lk.(Memoizing)
	var m *Memo
	if ok {
		m = mz.Memo()
	}
	var unpermitted []types.NamespacedName
	if m == nil {
		desc, deep, err := worstDescendants(ctx, lk, consent, p, onPath, depth, &unpermitted)
		return desc, deep, unpermitted, err
	}
	key := memoKeyOf(p, depth)
	gen := m.gen.Load() // before any read of the store
	m.mu.Lock()
	e, hit := m.entries[key]
	m.mu.Unlock()
	if hit && e.gen == gen {
		return e.descendants, e.tooDeep, e.unpermitted, nil
	}
	consent.readLabels = false
	desc, deep, err := worstDescendants(ctx, lk, consent, p, onPath, depth, &unpermitted)
	if err != nil || consent.readLabels {
		return desc, deep, unpermitted, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil || len(m.entries) >= maxMemoEntries {
		m.entries = map[memoKey]memoEntry{}
	}
	if m.gen.Load() == gen {
		m.entries[key] = memoEntry{gen: gen, descendants: slices.Clip(desc), tooDeep: deep, unpermitted: slices.Clip(unpermitted)}
	}
	return desc, deep, unpermitted, nil
}
