package v1alpha1

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/runtime/codes"
	"github.com/retryguard/retryguard/runtime/httprules"
	"github.com/retryguard/retryguard/runtime/limits"
)

// supportedJitter is what the CRD's enum admits: the modes of package limits,
// and None, named only to be refused with ERR_JITTER_REQUIRED.
var supportedJitter = append(slices.Clone(limits.JitterModes), string(JitterNone))

// ValidateRetryPolicySpec checks every rule that needs nothing but the spec.
// The CRD carries the same rules as CEL; the webhooks run this function too so
// that the rules hold even where the CRD lacks them. Absent optional fields
// take their defaults first, as they do in the API server.
func ValidateRetryPolicySpec(spec *RetryPolicySpec, fldPath *field.Path) field.ErrorList {
	s := spec.WithDefaults()
	var errs field.ErrorList
	if s.MaxAttempts < 1 || s.MaxAttempts > limits.MaxAttemptsCeiling {
		errs = append(errs, Invalid(fldPath.Child("maxAttempts"), s.MaxAttempts, codes.RetryLimitExceeded,
			"maxAttempts counts total attempts (the first call included) and must be "+between(1, limits.MaxAttemptsCeiling)))
	}
	if h := *s.Layer.HiddenAttempts; h < 1 || h > limits.MaxHiddenAttempts {
		errs = append(errs, Invalid(fldPath.Child("layer", "hiddenAttempts"), h, codes.OutOfRange,
			outOfRange("layer.hiddenAttempts", 1, limits.MaxHiddenAttempts)))
	}
	errs = append(errs, validateAllowedChildren(s.Layer.AllowedChildren, fldPath.Child("layer", "allowedChildren"))...)
	errs = append(errs, validateBackoff(&s.Backoff, fldPath.Child("backoff"))...)
	errs = append(errs, validateRetryOn(s.RetryOn, fldPath.Child("retryOn"))...)
	errs = append(errs, validateIdempotency(&s, fldPath)...)
	errs = append(errs, validateDeadlines(&s, fldPath)...)
	if s.MaxAttempts > 1 && s.BudgetRef == nil {
		errs = append(errs, Invalid(fldPath.Child("budgetRef"), nil, codes.BudgetRequired,
			"a policy with maxAttempts above 1 must name a RetryBudget in budgetRef; retries without a budget caused INC-2901"))
	}
	if p := s.ConnectionPool; p != nil && (p.MaxConnections < 1 || p.MaxConnections > limits.MaxConnectionsPerPool) {
		errs = append(errs, Invalid(fldPath.Child("connectionPool", "maxConnections"), p.MaxConnections, codes.OutOfRange,
			outOfRange("connectionPool.maxConnections", 1, limits.MaxConnectionsPerPool)))
	}
	if c := *s.Criticality; !slices.Contains(limits.Criticalities, string(c)) {
		errs = append(errs, field.NotSupported(fldPath.Child("criticality"), c, limits.Criticalities))
	}
	if s.Fallback != nil {
		for i := range s.Fallback.Channels {
			errs = append(errs, validateFallbackChannel(&s.Fallback.Channels[i], fldPath.Child("fallback", "channels").Index(i))...)
		}
	}
	return SortErrors(errs)
}

// validateAllowedChildren: a selector goes with from: Selector, and only
// with it, and parses as a label selector.
func validateAllowedChildren(ac *AllowedChildren, fldPath *field.Path) field.ErrorList {
	if ac == nil || ac.Namespaces == nil {
		return nil
	}
	ns, path := ac.Namespaces, fldPath.Child("namespaces")
	var errs field.ErrorList
	from := NamespacesFromSame
	if ns.From != nil {
		from = *ns.From
	}
	switch from {
	case NamespacesFromSame, NamespacesFromAll, NamespacesFromSelector:
	default:
		errs = append(errs, field.NotSupported(path.Child("from"), from, []string{
			string(NamespacesFromSame), string(NamespacesFromAll), string(NamespacesFromSelector)}))
	}
	if (from == NamespacesFromSelector) != (ns.Selector != nil) {
		errs = append(errs, Invalid(path.Child("selector"), nil, codes.InvalidSelector,
			"namespaces.selector is required when from is Selector, and allowed only then"))
	}
	return append(errs, validateLabelSelector(ns.Selector, path.Child("selector"))...)
}

func validateBackoff(b *Backoff, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch b.Jitter {
	case JitterNone:
		errs = append(errs, Invalid(fldPath.Child("jitter"), b.Jitter, codes.JitterRequired,
			"backoff.jitter None makes every caller retry in lockstep; use Full, Equal or Decorrelated"))
	default:
		if !slices.Contains(limits.JitterModes, string(b.Jitter)) {
			errs = append(errs, field.NotSupported(fldPath.Child("jitter"), b.Jitter, supportedJitter))
		}
	}
	errs = append(errs, validateDuration(*b.Base, fldPath.Child("base"))...)
	errs = append(errs, validateDuration(*b.Cap, fldPath.Child("cap"))...)
	// Like the CRD's rules, the comparisons hold only between durations that parse.
	if b.Base.Valid() && b.Base.Duration() <= 0 {
		errs = append(errs, Invalid(fldPath.Child("base"), string(*b.Base), codes.JitterRequired,
			"backoff.base 0s is an immediate retry; use a positive base such as 100ms"))
	}
	if b.Base.Valid() && b.Cap.Valid() && b.Cap.Duration() < b.Base.Duration() {
		errs = append(errs, Invalid(fldPath.Child("cap"), string(*b.Cap), codes.BackoffInvalid,
			"backoff.cap must be at least backoff.base"))
	}
	if m := *b.Multiplier; m < 1 || m > limits.MaxBackoffMultiplier {
		errs = append(errs, Invalid(fldPath.Child("multiplier"), m, codes.OutOfRange,
			outOfRange("backoff.multiplier", 1, limits.MaxBackoffMultiplier)))
	}
	return errs
}

func validateRetryOn(r *RetryOn, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, c := range r.StatusCodes {
		if !httprules.IsRetryableStatus(c) {
			errs = append(errs, Invalid(fldPath.Child("statusCodes"), r.StatusCodes, codes.NonRetryableStatus,
				"retryOn.statusCodes may hold only 429 and 5xx other than 501 and 505; other statuses never succeed on retry"))
			break
		}
	}
	for i, e := range r.Errors {
		if !slices.Contains(limits.TransportErrors, string(e)) {
			errs = append(errs, field.NotSupported(fldPath.Child("errors").Index(i), e, limits.TransportErrors))
		}
	}
	return errs
}

func validateIdempotency(s *RetryPolicySpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if h := *s.Idempotency.Header; !httprules.IsHeaderToken(h) {
		errs = append(errs, Invalid(fldPath.Child("idempotency", "header"), h, codes.InvalidHeader,
			"idempotency.header must be an HTTP field name: letters, digits and !#$%&'*+.^_|~- only, no space, CR or LF"))
	}
	tmpl := s.Idempotency.KeyTemplate
	if tmpl != nil {
		p := fldPath.Child("idempotency", "keyTemplate")
		for _, problem := range httprules.KeyTemplateProblems(*tmpl) {
			errs = append(errs, Invalid(p, *tmpl, keyTemplateMessages[problem].code, keyTemplateMessages[problem].text))
		}
	}
	operation := ""
	if s.Target.Operation != nil {
		operation = *s.Target.Operation
	}
	if s.MaxAttempts > 1 && !httprules.MayRetry(operation, tmpl != nil, s.RetryOn.StatusCodes, s.RetryOn.Errors) {
		errs = append(errs, Invalid(fldPath.Child("maxAttempts"), s.MaxAttempts, codes.AmbiguousWithoutIdempotency,
			"a policy with maxAttempts above 1 must be safe to replay; set idempotency.keyTemplate, use an idempotent method "+
				"(GET, HEAD, PUT, DELETE, OPTIONS, TRACE) in target.operation, or retry only failures that prove the request never left "+
				"(retryOn.statusCodes empty, retryOn.errors only ConnectionRefused and DNSFailure)"))
	}
	return errs
}

// keyTemplateMessages are the CEL rules' codes and messages, one per broken rule.
var keyTemplateMessages = map[httprules.KeyTemplateProblem]struct {
	code codes.Code
	text string
}{
	httprules.KeyTemplateMalformed: {codes.InvalidKeyTemplate,
		"idempotency.keyTemplate placeholders are {name} with letters, digits and underscores, and braces must pair"},
	httprules.KeyTemplateConstant: {codes.UnstableIdempotencyKey,
		"idempotency.keyTemplate has no {placeholder}, so every operation would share one key"},
	httprules.KeyTemplatePerAttempt: {codes.UnstableIdempotencyKey,
		"idempotency.keyTemplate uses a per-attempt value ({attempt}, {random}, {uuid}, {now} or {timestamp}), so retries would carry new keys"},
}

func validateDeadlines(s *RetryPolicySpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateDuration(s.Deadline, fldPath.Child("deadline"))...)
	errs = append(errs, validateDuration(*s.MinRemaining, fldPath.Child("minRemaining"))...)
	if t := s.PerAttemptTimeout; t != nil {
		errs = append(errs, validateDuration(*t, fldPath.Child("perAttemptTimeout"))...)
	}
	if d := s.RetryAfter.MaxDelay; d != nil {
		errs = append(errs, validateDuration(*d, fldPath.Child("retryAfter", "maxDelay"))...)
	}
	// Like the CRD's rules, the comparisons hold only between durations that parse.
	if !s.Deadline.Valid() {
		return errs
	}
	deadline := s.Deadline.Duration()
	if deadline <= 0 {
		errs = append(errs, Invalid(fldPath.Child("deadline"), string(s.Deadline), codes.DeadlineInfeasible,
			"deadline must be positive"))
	}
	if m := s.MinRemaining; s.MaxAttempts > 1 && m.Valid() && deadline <= m.Duration() {
		errs = append(errs, Invalid(fldPath.Child("deadline"), string(s.Deadline), codes.DeadlineInfeasible,
			"deadline must exceed minRemaining, or no retry could ever start"))
	}
	// Only a maxDelay the user wrote can break this: the absent default is
	// derived from the deadline (RetryAfterMaxDelay).
	if d := s.RetryAfter.MaxDelay; s.MaxAttempts > 1 && d != nil && d.Valid() && d.Duration() >= deadline {
		errs = append(errs, Invalid(fldPath.Child("retryAfter", "maxDelay"), string(*d), codes.DeadlineInfeasible,
			"retryAfter.maxDelay must be below deadline, or an honoured Retry-After would outlive the operation"))
	}
	if t := s.PerAttemptTimeout; t != nil && t.Valid() && t.Duration() > deadline {
		errs = append(errs, Invalid(fldPath.Child("perAttemptTimeout"), string(*t), codes.DeadlineInfeasible,
			"perAttemptTimeout must not exceed deadline"))
	}
	return errs
}

// validateDuration refuses what the Duration type's CEL rule refuses.
func validateDuration(d Duration, fldPath *field.Path) field.ErrorList {
	if d.Valid() {
		return nil
	}
	return field.ErrorList{Invalid(fldPath, string(d), codes.InvalidDuration, durationMessage)}
}

func validateFallbackChannel(c *FallbackChannel, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !httprules.IsSecureEndpoint(c.Endpoint) {
		errs = append(errs, Invalid(fldPath.Child("endpoint"), c.Endpoint, codes.UntestedCompensationBlocked,
			"fallback endpoint must be an https:// URL; secrets must not leave on an unencrypted channel"))
	}
	if c.Verified == nil || !*c.Verified {
		errs = append(errs, Invalid(fldPath.Child("verified"), c.Verified, codes.UntestedCompensationBlocked,
			"fallback channel must be verified: true before operations may be routed to it"))
	}
	return errs
}

// RetryAfterMaxDelay is the longest Retry-After a pod honours: the
// maxDelay written, or when absent DefaultRetryAfterMaxDelay capped at
// deadline − minRemaining (defaults applied, never negative). A short
// deadline that never mentions retryAfter is therefore valid, and a
// Retry-After the deadline could not hold fails fast instead of waiting.
func (s *RetryPolicySpec) RetryAfterMaxDelay() time.Duration {
	if s.RetryAfter != nil && s.RetryAfter.MaxDelay != nil {
		return s.RetryAfter.MaxDelay.Duration()
	}
	minRemaining := mustDuration(DefaultMinRemaining).Duration()
	if s.MinRemaining != nil {
		minRemaining = s.MinRemaining.Duration()
	}
	return max(0, min(DefaultRetryAfterMaxDelay, s.Deadline.Duration()-minRemaining))
}
