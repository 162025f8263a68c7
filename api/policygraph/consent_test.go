package policygraph_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// TestChildPermitted is the consent rule as a table: the parent's own
// namespace always, another namespace only with from All, or Selector and
// matching labels.
func TestChildPermitted(t *testing.T) {
	team := map[string]string{"team": "pay"}
	for name, tc := range map[string]struct {
		parent  v1.RetryPolicy
		childNS string
		labels  map[string]string
		want    bool
	}{
		"own namespace, from unset":            {polIn("gw", "p", "l", 1), "gw", nil, true},
		"own namespace, from Selector":         {polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSelector, team)), "gw", nil, true},
		"other namespace, from unset":          {polIn("gw", "p", "l", 1), "pay", team, false},
		"other namespace, from Same":           {polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSame, nil)), "pay", team, false},
		"other namespace, from All":            {polIn("gw", "p", "l", 1, allow(v1.NamespacesFromAll, nil)), "pay", nil, true},
		"other namespace, Selector matches":    {polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSelector, team)), "pay", team, true},
		"other namespace, Selector mismatch":   {polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSelector, team)), "pay", map[string]string{"team": "ads"}, false},
		"other namespace, Selector, no labels": {polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSelector, team)), "pay", nil, false},
		"Selector on the name label": {polIn("gw", "p", "l", 1,
			allow(v1.NamespacesFromSelector, map[string]string{"kubernetes.io/metadata.name": "pay"})), "pay", nil, true},
		"Selector with no selector refuses": {func() v1.RetryPolicy {
			p := polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSelector, team))
			p.Spec.Layer.AllowedChildren.Namespaces.Selector = nil
			return p
		}(), "pay", team, false},
		"a malformed selector refuses": {func() v1.RetryPolicy {
			p := polIn("gw", "p", "l", 1, allow(v1.NamespacesFromSelector, nil))
			p.Spec.Layer.AllowedChildren.Namespaces.Selector = &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}}
			return p
		}(), "pay", team, false},
		"an unknown from refuses": {func() v1.RetryPolicy {
			p := polIn("gw", "p", "l", 1, allow(v1.NamespacesFromAll, nil))
			p.Spec.Layer.AllowedChildren.Namespaces.From = ptr.To(v1.FromNamespaces("Everyone"))
			return p
		}(), "pay", team, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := policygraph.ChildPermitted(&tc.parent, tc.childNS, tc.labels); got != tc.want {
				t.Errorf("ChildPermitted = %v, want %v", got, tc.want)
			}
		})
	}
}
