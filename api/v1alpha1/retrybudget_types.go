package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of RetryBudget.
const (
	DefaultBudgetWindow              = "60s"
	DefaultBudgetMaxTokens           = int32(10)
	DefaultBudgetMinRetriesPerSecond = int32(0)
	DefaultBudgetPartitions          = int32(1)
)

// RetryBudgetSpec is a token-bucket retry budget for one dependency.
// +kubebuilder:validation:XValidation:rule="!has(self.maxRetriesPerSecond) || self.maxRetriesPerSecond < 0 || !has(self.minRetriesPerSecond) || self.minRetriesPerSecond <= self.maxRetriesPerSecond",message="ERR_OUT_OF_RANGE: minRetriesPerSecond must not be above maxRetriesPerSecond",fieldPath=".minRetriesPerSecond"
type RetryBudgetSpec struct {
	// retryPercent is the retry allowance, from 1 to 100 (the platform caps it
	// further, at 10 by default). Each success deposits retryPercent/100 of a
	// token and each retry withdraws one; retries are also capped at
	// retryPercent% of primary attempts over window.
	// +required
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxBudgetRetryPercent}",message="ERR_OUT_OF_RANGE: retryPercent must be between 1 and ${limits.MaxBudgetRetryPercent}"
	RetryPercent int32 `json:"retryPercent"`

	// window is the rolling window of the ratio cap, from 1s to 1h.
	// +optional
	// +default="60s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('${limits.MinBudgetWindow}') && duration(self) <= duration('${limits.MaxBudgetWindow}'))",message="ERR_OUT_OF_RANGE: window must be between ${limits.MinBudgetWindow} and ${limits.MaxBudgetWindow}"
	Window *Duration `json:"window,omitempty"`

	// maxTokens is the bucket's capacity, the largest burst of retries, from 1 to 1000.
	// +optional
	// +default=10
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxBudgetTokens}",message="ERR_OUT_OF_RANGE: maxTokens must be between 1 and ${limits.MaxBudgetTokens}"
	MaxTokens *int32 `json:"maxTokens,omitempty"`

	// minRetriesPerSecond is a floor of retries allowed whatever the tokens,
	// so that low-traffic callers can still retry: it applies while a pod's
	// window holds fewer primaries than its start credit, and past them the
	// ratio rules (INV-RTY-04).
	// +optional
	// +default=0
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= ${limits.MaxBudgetMinRetriesPerSecond}",message="ERR_OUT_OF_RANGE: minRetriesPerSecond must be between 0 and ${limits.MaxBudgetMinRetriesPerSecond}"
	MinRetriesPerSecond *int32 `json:"minRetriesPerSecond,omitempty"`

	// partitions is the number of pods that share the budget. Each pod gets
	// maxTokens/partitions, minRetriesPerSecond/partitions and
	// maxRetriesPerSecond/partitions, each rounded down, so the pods together
	// never exceed any figure. With consumers set the count divides them
	// instead: a pod a fresh count names takes 1/count, and a pod no fresh
	// count names (a stale count included) takes nothing.
	// +optional
	// +default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxBudgetPartitions}",message="ERR_OUT_OF_RANGE: partitions must be between 1 and ${limits.MaxBudgetPartitions}"
	Partitions *int32 `json:"partitions,omitempty"`

	// maxRetriesPerSecond is an absolute retry allowance for the whole fleet
	// of consumers, whatever the traffic: RG-LOAD's "total 20/s retry
	// allowance". Each pod enforces its share. Unset means no absolute
	// allowance (the ratio and the tokens still apply); 0 allows no retry.
	// From 0 to 100000.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= ${limits.MaxBudgetRetriesPerSecond}",message="ERR_OUT_OF_RANGE: maxRetriesPerSecond must be between 0 and ${limits.MaxBudgetRetriesPerSecond}"
	MaxRetriesPerSecond *int32 `json:"maxRetriesPerSecond,omitempty"`

	// consumers are the pods that share the budget. The controller counts
	// them and publishes the count, so that each pod enforces its share of
	// the absolute figures (maxRetriesPerSecond, maxTokens,
	// minRetriesPerSecond) rather than all of them.
	// +optional
	Consumers *BudgetConsumers `json:"consumers,omitempty"`
}

// BudgetConsumers selects the pods that share a budget.
type BudgetConsumers struct {
	// podSelector selects the consuming pods, in the budget's namespace and
	// in every namespace that namespaces admits. It must select every pod
	// that draws on the budget; an empty selector selects every pod of
	// those namespaces.
	// +required
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// namespaces are the namespaces whose RetryPolicies may name this
	// budget in budgetRef, and whose pods podSelector counts: Same (when
	// unset: the budget's namespace only), All, or Selector. A foreign
	// consumer lowers every pod's share, so consent is never assumed.
	// +optional
	Namespaces *AllowedNamespaces `json:"namespaces,omitempty"`
}

// RetryBudgetStatus is the observed state of a RetryBudget.
type RetryBudgetStatus struct {
	// conditions report whether the budget is in force.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// observedGeneration is the generation last reconciled successfully; 0
	// until the controller first reconciles the budget.
	// +optional
	// +default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// policyCount is the number of RetryPolicies that reference this budget.
	// +optional
	PolicyCount int32 `json:"policyCount,omitempty"`

	// consumers is the live number of pods that match
	// spec.consumers.podSelector: every such pod that exists, terminating
	// ones included, because they may still retry.
	// +optional
	Consumers *int32 `json:"consumers,omitempty"`
}

// RetryBudget is a token-bucket retry budget for one dependency, shared by
// every RetryPolicy that names it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rb,categories=retryguard
// +kubebuilder:printcolumn:name="Percent",type=integer,JSONPath=`.spec.retryPercent`
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.spec.window`
// +kubebuilder:printcolumn:name="Policies",type=integer,JSONPath=`.status.policyCount`
// +kubebuilder:printcolumn:name="Consumers",type=integer,JSONPath=`.status.consumers`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Partitions",type=integer,priority=1,JSONPath=`.spec.partitions`
// +kubebuilder:printcolumn:name="MaxRetries/s",type=integer,priority=1,JSONPath=`.spec.maxRetriesPerSecond`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RetryBudget struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the budget.
	// +required
	Spec RetryBudgetSpec `json:"spec"`

	// status is the observed state. It defaults to observedGeneration 0, so
	// that a budget the controller has not yet observed reads as in
	// progress, never as current (docs/status.md).
	// +optional
	// +default={}
	Status RetryBudgetStatus `json:"status,omitzero"`
}

// RetryBudgetList is a list of RetryBudget.
//
// +kubebuilder:object:root=true
type RetryBudgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RetryBudget `json:"items"`
}
