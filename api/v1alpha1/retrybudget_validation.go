package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/runtime/codes"
	"github.com/retryguard/retryguard/runtime/limits"
)

// ValidateRetryBudgetSpec checks every rule that needs nothing but the spec;
// the CRD carries the same rules as CEL.
func ValidateRetryBudgetSpec(spec *RetryBudgetSpec, fldPath *field.Path) field.ErrorList {
	s := spec.WithDefaults()
	var errs field.ErrorList
	if s.RetryPercent < 1 || s.RetryPercent > limits.MaxBudgetRetryPercent {
		errs = append(errs, Invalid(fldPath.Child("retryPercent"), s.RetryPercent, codes.OutOfRange,
			outOfRange("retryPercent", 1, limits.MaxBudgetRetryPercent)))
	}
	errs = append(errs, validateDuration(*s.Window, fldPath.Child("window"))...)
	if w := s.Window.Duration(); s.Window.Valid() && (w < limits.MinBudgetWindow || w > limits.MaxBudgetWindow) {
		errs = append(errs, Invalid(fldPath.Child("window"), string(*s.Window), codes.OutOfRange,
			outOfRange("window", limits.MinBudgetWindow, limits.MaxBudgetWindow)))
	}
	if t := *s.MaxTokens; t < 1 || t > limits.MaxBudgetTokens {
		errs = append(errs, Invalid(fldPath.Child("maxTokens"), t, codes.OutOfRange,
			outOfRange("maxTokens", 1, limits.MaxBudgetTokens)))
	}
	if f := *s.MinRetriesPerSecond; f < 0 || f > limits.MaxBudgetMinRetriesPerSecond {
		errs = append(errs, Invalid(fldPath.Child("minRetriesPerSecond"), f, codes.OutOfRange,
			outOfRange("minRetriesPerSecond", 0, limits.MaxBudgetMinRetriesPerSecond)))
	}
	if p := *s.Partitions; p < 1 || p > limits.MaxBudgetPartitions {
		errs = append(errs, Invalid(fldPath.Child("partitions"), p, codes.OutOfRange,
			outOfRange("partitions", 1, limits.MaxBudgetPartitions)))
	}
	if m := s.MaxRetriesPerSecond; m != nil && (*m < 0 || *m > limits.MaxBudgetRetriesPerSecond) {
		errs = append(errs, Invalid(fldPath.Child("maxRetriesPerSecond"), *m, codes.OutOfRange,
			outOfRange("maxRetriesPerSecond", 0, limits.MaxBudgetRetriesPerSecond)))
	}
	// A floor above the allowance (judged only on an allowance in range, so
	// that a negative one is refused once).
	if m, f := s.MaxRetriesPerSecond, *s.MinRetriesPerSecond; m != nil && *m >= 0 && f > *m {
		errs = append(errs, Invalid(fldPath.Child("minRetriesPerSecond"), f, codes.OutOfRange,
			"minRetriesPerSecond must not be above maxRetriesPerSecond"))
	}
	if c := s.Consumers; c != nil {
		if c.PodSelector == nil {
			errs = append(errs, Invalid(fldPath.Child("consumers", "podSelector"), nil, codes.InvalidSelector,
				"consumers.podSelector is required: the pods that share the budget"))
		}
		errs = append(errs, validateLabelSelector(c.PodSelector, fldPath.Child("consumers", "podSelector"))...)
	}
	return SortErrors(errs)
}

// validateLabelSelector checks what the API server cannot: that a selector
// converts to a labels.Selector. Each error carries ERR_INVALID_SELECTOR.
func validateLabelSelector(sel *metav1.LabelSelector, fldPath *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return field.ErrorList{Invalid(fldPath, nil, codes.InvalidSelector,
			"not a valid label selector: "+err.Error())}
	}
	return nil
}
