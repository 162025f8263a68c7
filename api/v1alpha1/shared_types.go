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
