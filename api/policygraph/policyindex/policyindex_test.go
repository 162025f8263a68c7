package policyindex_test

import (
	"slices"
	"testing"

	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// The parentRef index keys a child by its parent's namespace and name, the
// namespace defaulting to the child's own, so that a parent finds its
// children in every namespace and never a namesake's.
func TestParentRefIndexKeysTheParentsNamespace(t *testing.T) {
	index := policyindex.IndexFuncs()[policyindex.IndexParentRef]
	for _, tc := range []struct {
		name string
		opts []fixtures.Option
		want []string
	}{
		{"no parent", nil, nil},
		{"a parent at home", []fixtures.Option{fixtures.Parent("job")}, []string{"payments/job"}},
		{"a parent elsewhere", []fixtures.Option{fixtures.ParentIn("gateway", "job")}, []string{"gateway/job"}},
	} {
		if got := index(fixtures.Policy("payments", "connector", "connector", 1, tc.opts...)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: index %q, want %q", tc.name, got, tc.want)
		}
	}
}
