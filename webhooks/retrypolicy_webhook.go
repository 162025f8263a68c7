package webhooks

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-policy-retryguard-io-v1alpha1-retrypolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=policy.retryguard.io,resources=retrypolicies,verbs=create;update,versions=v1alpha1,name=vretrypolicy-v1alpha1.policy.retryguard.io,admissionReviewVersions=v1,timeoutSeconds=5

// RetryPolicyValidator admits RetryPolicies. It is safe for concurrent use.
type RetryPolicyValidator struct {
	// Reader serves other policies and the labels of namespaces; in the
	// manager it is the indexed cache.
	Reader client.Reader
	// Limits are the platform's cross-object limits.
	Limits policygraph.Limits
}

var _ admission.Validator[*v1.RetryPolicy] = &RetryPolicyValidator{}

// ValidateCreate admits a new policy.
func (v *RetryPolicyValidator) ValidateCreate(ctx context.Context, p *v1.RetryPolicy) (admission.Warnings, error) {
	return v.validate(ctx, p)
}

// ValidateUpdate admits a changed policy, checked as the stored policy it would become.
func (v *RetryPolicyValidator) ValidateUpdate(ctx context.Context, _, p *v1.RetryPolicy) (admission.Warnings, error) {
	return v.validate(ctx, p)
}

// ValidateDelete admits every deletion: children of a deleted parent turn not
// Ready through their controller.
func (v *RetryPolicyValidator) ValidateDelete(context.Context, *v1.RetryPolicy) (admission.Warnings, error) {
	return nil, nil
}

// ReviewBudget bounds the cross-object work of one review, below the
// webhook's 5 s timeout: a review that has not finished by then is refused
// (admission fails closed) instead of holding a core for a caller that has
// given up. The API server's own timeout also ends it, through the
// request's context.
const ReviewBudget = 3 * time.Second

func (v *RetryPolicyValidator) validate(ctx context.Context, p *v1.RetryPolicy) (admission.Warnings, error) {
	ctx, cancel := context.WithTimeout(ctx, ReviewBudget)
	defer cancel()
	spec := field.NewPath("spec")
	errs := v1.ValidateRetryPolicySpec(&p.Spec, spec)
	verdict, err := policygraph.ValidateRetryPolicy(ctx, policyindex.CacheLookup{Reader: v.Reader}, p, v.Limits, spec, policygraph.AnsweringRequester())
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	errs = v1.SortErrors(append(errs, verdict.Errors...))
	if len(errs) > 0 {
		return verdict.Warnings, apierrors.NewInvalid(v1.GroupVersion.WithKind("RetryPolicy").GroupKind(), p.Name, errs)
	}
	return verdict.Warnings, nil
}
