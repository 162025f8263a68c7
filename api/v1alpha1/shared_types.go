package v1alpha1

// ConditionReady is the one condition both kinds report: whether the object is
// in force (published and enforceable by the pods that call the dependency).
const ConditionReady = "Ready"

// LocalObjectReference names another object of the expected kind in the same
// namespace.
type LocalObjectReference struct {
	// name of the referenced object, in the same namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// Reasons of a RetryPolicy's Ready condition. Every not-Ready reason is also
// the NoRetry reason the policy's pods see, so users and pods read them too.
const (
	ReasonPublished             = "Published"
	ReasonInvalidSpec           = "InvalidSpec"
	ReasonLayerCycle            = "LayerCycle"
	ReasonAmplificationExceeded = "AmplificationExceeded"
	ReasonSharedFailureDomain   = "SharedFailureDomain"
	ReasonParentNotFound        = "ParentNotFound"
	// ReasonParentNotPermitted: the parent, in another namespace, does not
	// (or no longer does) allow this namespace in layer.allowedChildren.
	ReasonParentNotPermitted = "ParentNotPermitted"
	ReasonBudgetNotFound     = "BudgetNotFound"
	ReasonPublishFailed      = "PublishFailed"
)

// Reasons of a RetryBudget's Ready condition.
const (
	ReasonAccepted         = "Accepted"
	ReasonAbovePlatformCap = "AbovePlatformCap"
)
