// Package v1alpha1 contains the policy.retryguard.io/v1alpha1 API: RetryPolicy,
// how one layer of one caller retries one dependency, and RetryBudget, the
// token-bucket retry budget those policies share.
//
// +kubebuilder:object:generate=true
// +groupName=policy.retryguard.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "policy.retryguard.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme. It is
	// apimachinery's, not controller-runtime's, so that importing the API
	// costs a client nothing beyond apimachinery.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers both kinds and their lists.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &RetryPolicy{}, &RetryPolicyList{}, &RetryBudget{}, &RetryBudgetList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
