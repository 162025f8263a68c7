package webhooks

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-policy-retryguard-io-v1alpha1-retrybudget,mutating=false,failurePolicy=fail,sideEffects=None,groups=policy.retryguard.io,resources=retrybudgets,verbs=create;update,versions=v1alpha1,name=vretrybudget-v1alpha1.policy.retryguard.io,admissionReviewVersions=v1,timeoutSeconds=5

// RetryBudgetValidator admits RetryBudgets. It is safe for concurrent use.
type RetryBudgetValidator struct {
	// Limits are the platform's limits; MaxRetryPercent applies here.
	Limits policygraph.Limits
}

var _ admission.Validator[*v1.RetryBudget] = &RetryBudgetValidator{}

// ValidateCreate admits a new budget.
func (v *RetryBudgetValidator) ValidateCreate(_ context.Context, b *v1.RetryBudget) (admission.Warnings, error) {
	return v.validate(b)
}

// ValidateUpdate admits a changed budget.
func (v *RetryBudgetValidator) ValidateUpdate(_ context.Context, _, b *v1.RetryBudget) (admission.Warnings, error) {
	return v.validate(b)
}

// ValidateDelete admits every deletion: policies that used the budget turn
// not Ready (and stop retrying) through their controller.
func (v *RetryBudgetValidator) ValidateDelete(context.Context, *v1.RetryBudget) (admission.Warnings, error) {
	return nil, nil
}

func (v *RetryBudgetValidator) validate(b *v1.RetryBudget) (admission.Warnings, error) {
	// The single-object rules are the CRD's, which the API server checked
	// before calling.
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if c := b.Spec.Consumers; c != nil {
		errs = policygraph.LabelSelectorErrors(c.PodSelector, spec.Child("consumers", "podSelector"))
	}
	errs = append(errs, policygraph.BudgetSelectorErrors(b, spec)...)
	verdict := policygraph.ValidateRetryBudget(b, v.Limits, spec)
	errs = v1.SortErrors(append(errs, verdict.Errors...))
	if len(errs) > 0 {
		return verdict.Warnings, apierrors.NewInvalid(v1.GroupVersion.WithKind("RetryBudget").GroupKind(), b.Name, errs)
	}
	return verdict.Warnings, nil
}
