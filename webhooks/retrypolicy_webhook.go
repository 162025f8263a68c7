package webhooks

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-policy-retryguard-io-v1alpha1-retrypolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=policy.retryguard.io,resources=retrypolicies,verbs=create;update,versions=v1alpha1,name=vretrypolicy-v1alpha1.policy.retryguard.io,admissionReviewVersions=v1,timeoutSeconds=5

// RetryPolicyValidator admits RetryPolicies. It is safe for concurrent use.
// The manager's is NewRetryPolicyValidator's; one built from its fields
// alone lists children through Reader and has no bound on concurrent
// reviews.
type RetryPolicyValidator struct {
	// Reader serves other policies and the labels of namespaces; in the
	// manager it is the indexed cache.
	Reader client.Reader
	// Limits are the platform's cross-object limits.
	Limits policygraph.Limits

	lookup policygraph.Lookup // nil: policyindex.CacheLookup{Reader: Reader}
	turns  *gate
}

// NewRetryPolicyValidator is the manager's validator: it reads children in
// place from c's RetryPolicy informer (policyindex.NewIndexedLookup) and
// judges at most MaxConcurrentReviews reviews at once, at most
// MaxConcurrentReviewsPerNamespace of one namespace's. The manager calls
// it before c starts; a started cache serves it too.
func NewRetryPolicyValidator(ctx context.Context, c cache.Cache, limits policygraph.Limits) (*RetryPolicyValidator, error) {
	lk, err := policyindex.NewIndexedLookup(ctx, c)
	if err != nil {
		return nil, err
	}
	return &RetryPolicyValidator{Reader: c, Limits: limits, lookup: lk, turns: newGate(MaxConcurrentReviews, MaxConcurrentReviewsPerNamespace)}, nil
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
	leave := v.turns.enter(ctx, p.Namespace, ReviewQueueWait)
	if leave == nil {
		if ctx.Err() != nil {
			return nil, errOutOfTime()
		}
		return nil, errBusy(p.Namespace)
	}
	defer leave()
	lk := v.lookup
	if lk == nil {
		lk = policyindex.CacheLookup{Reader: v.Reader}
	}
	// The single-object rules are the CRD's, which the API server checked
	// before calling: this review adds what one object cannot show.
	spec := field.NewPath("spec")
	errs := policygraph.SelectorErrors(p, spec)
	verdict, err := policygraph.ValidateRetryPolicy(ctx, lk, p, v.Limits, spec, policygraph.AnsweringRequester())
	if ctx.Err() != nil {
		return nil, errOutOfTime() // whatever the walk returned: a verdict cut short is no verdict
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	errs = v1.SortErrors(append(errs, verdict.Errors...))
	if len(errs) > 0 {
		return verdict.Warnings, apierrors.NewInvalid(v1.GroupVersion.WithKind("RetryPolicy").GroupKind(), p.Name, errs)
	}
	return verdict.Warnings, nil
}
