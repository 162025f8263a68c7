package policygraph_test

import (
	"context"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// memoized is a StaticLookup with a Memo that counts the children it lists.
type memoized struct {
	policygraph.StaticLookup
	memo  *policygraph.Memo
	lists *atomic.Int64
}

func (m memoized) Memo() *policygraph.Memo { return m.memo }

func (m memoized) Children(ctx context.Context, parent types.NamespacedName) ([]v1.RetryPolicy, error) {
	m.lists.Add(1)
	return m.StaticLookup.Children(ctx, parent)
}

// A parent's walk is kept until the store changes: a second review of a
// root with many children lists nothing, a change (Changed) makes the next
// one walk again and see it, and a walk a namespace's labels decided is
// never kept.
func TestMemoKeepsTheWalkUntilTheStoreChanges(t *testing.T) {
	ctx := context.Background()
	stored := []v1.RetryPolicy{polIn("ns", "root", "root", 1, allow(v1.NamespacesFromSelector, map[string]string{"team": "pay"}))}
	for _, name := range []string{"a", "b", "c"} {
		stored = append(stored, polIn("ns", name, name, 1, parent("root")))
	}
	lk := memoized{StaticLookup: policygraph.NewStaticLookup(stored...), memo: &policygraph.Memo{}, lists: &atomic.Int64{}}
	root := stored[0]
	analyze := func() policygraph.Analysis {
		t.Helper()
		a, err := policygraph.Analyze(ctx, lk, &root)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if got := analyze().Worst().Product(); got != 1 {
		t.Fatalf("product %d, want 1", got)
	}
	before := lk.lists.Load()
	analyze()
	if got := lk.lists.Load() - before; got != 0 {
		t.Errorf("a second review of an unchanged store listed children %d times", got)
	}

	// A new child: the store calls Changed before it is visible.
	lk.memo.Changed()
	lk.StaticLookup = policygraph.NewStaticLookup(append(stored, polIn("pay", "deep", "deep", 3, parentIn("ns", "root")))...).
		WithNamespace("pay", map[string]string{"team": "pay"})
	if got := analyze().Worst().Product(); got != 3 {
		t.Fatalf("after a change the product is %d, want 3 (the walk was not taken again)", got)
	}
	before = lk.lists.Load()
	analyze()
	if lk.lists.Load() == before {
		t.Errorf("a walk that read namespace labels (a Selector's consent) was kept")
	}
}
