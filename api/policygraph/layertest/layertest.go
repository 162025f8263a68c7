// Package layertest holds the fixture options of layers across namespaces,
// shared by the tests of the rules, the webhooks, the controllers and lint.
// They belong with api/v1alpha1/fixtures and can move there.
package layertest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// ParentIn sets layer.parentRef to a policy in namespace ns.
func ParentIn(ns, name string) fixtures.Option {
	return func(p *v1.RetryPolicy) {
		p.Spec.Layer.ParentRef = &v1.ParentReference{Name: name, Namespace: ptr.To(ns)}
	}
}

// Allowing sets layer.allowedChildren.namespaces.from, with a selector
// matching the labels in match when from is Selector.
func Allowing(from v1.FromNamespaces, match map[string]string) fixtures.Option {
	return func(p *v1.RetryPolicy) {
		cn := &v1.ChildNamespaces{From: ptr.To(from)}
		if from == v1.NamespacesFromSelector {
			cn.Selector = &metav1.LabelSelector{MatchLabels: match}
		}
		p.Spec.Layer.AllowedChildren = &v1.AllowedChildren{Namespaces: cn}
	}
}
