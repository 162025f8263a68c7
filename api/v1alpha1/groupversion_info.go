// Package v1alpha1 contains the policy.retryguard.io/v1alpha1 API: RetryPolicy,
// how one layer of one caller retries one dependency, and RetryBudget, the
// token-bucket retry budget those policies share.
//
// +kubebuilder:object:generate=true
// +groupName=policy.retryguard.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "policy.retryguard.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
