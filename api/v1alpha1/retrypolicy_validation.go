package v1alpha1

import (
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/api/codes"
	"github.com/retryguard/retryguard/api/httprules"
)

// These expressions are the ones the CRD's CEL rules use, so that the Go and
// CEL verdicts agree; the parity test holds them together.
var (
	wellFormedTemplate    = regexp.MustCompile(`^([^{}]|[{][A-Za-z_][A-Za-z0-9_]*[}])*$`)
	templatePlaceholder   = regexp.MustCompile(`[{][A-Za-z_][A-Za-z0-9_]*[}]`)
	perAttemptPlaceholder = regexp.MustCompile(`(?i)[{](attempt|random|uuid|now|timestamp)[}]`)
)

var (
	supportedJitter = []string{string(JitterFull), string(JitterEqual), string(JitterDecorrelated), string(JitterNone)}
	supportedErrors = []string{string(ConnectionRefused), string(ConnectionReset), string(Timeout), string(DNSFailure)}
	supportedCrit   = []string{string(CriticalityCritical), string(CriticalityStandard)}
)

// ValidateRetryPolicySpec checks every rule that needs nothing but the spec.
// The CRD carries the same rules as CEL; the webhooks run this function too so
// that the rules hold even where the CRD lacks them. Absent optional fields
// take their defaults first, as they do in the API server.
func ValidateRetryPolicySpec(spec *RetryPolicySpec, fldPath *field.Path) field.ErrorList {
	s := spec.WithDefaults()
	var errs field.ErrorList
	if s.MaxAttempts < 1 || s.MaxAttempts > MaxAttemptsCeiling {
		errs = append(errs, field.Invalid(fldPath.Child("maxAttempts"), s.MaxAttempts, codes.RetryLimitExceeded.Message(
			"maxAttempts counts total attempts (the first call included) and must be between 1 and 3")))
	}
	errs = append(errs, validateBackoff(&s.Backoff, fldPath.Child("backoff"))...)
	errs = append(errs, validateRetryOn(s.RetryOn, fldPath.Child("retryOn"))...)
	errs = append(errs, validateIdempotency(&s, fldPath)...)
	errs = append(errs, validateDeadlines(&s, fldPath)...)
	if s.MaxAttempts > 1 && s.BudgetRef == nil {
		errs = append(errs, field.Invalid(fldPath.Child("budgetRef"), nil, codes.BudgetRequired.Message(
			"a policy with maxAttempts above 1 must name a RetryBudget in budgetRef; retries without a budget caused INC-2901")))
	}
	if p := s.ConnectionPool; p != nil && (p.MaxConnections < 1 || p.MaxConnections > MaxConnectionsPerPoolLimit) {
		errs = append(errs, field.Invalid(fldPath.Child("connectionPool", "maxConnections"), p.MaxConnections, codes.OutOfRange.Message(
			"connectionPool.maxConnections must be between 1 and 1000")))
	}
	if c := *s.Criticality; c != CriticalityCritical && c != CriticalityStandard {
		errs = append(errs, field.NotSupported(fldPath.Child("criticality"), c, supportedCrit))
	}
	if s.Fallback != nil {
		for i := range s.Fallback.Channels {
			errs = append(errs, validateFallbackChannel(&s.Fallback.Channels[i], fldPath.Child("fallback", "channels").Index(i))...)
		}
	}
	return errs
}

func validateBackoff(b *Backoff, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch b.Jitter {
	case JitterNone:
		errs = append(errs, field.Invalid(fldPath.Child("jitter"), b.Jitter, codes.JitterRequired.Message(
			"backoff.jitter None makes every caller retry in lockstep; use Full, Equal or Decorrelated")))
	case JitterFull, JitterEqual, JitterDecorrelated:
	default:
		errs = append(errs, field.NotSupported(fldPath.Child("jitter"), b.Jitter, supportedJitter))
	}
	if b.Base.Duration <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("base"), b.Base.Duration.String(), codes.JitterRequired.Message(
			"backoff.base 0s is an immediate retry; use a positive base such as 100ms")))
	}
	if b.Cap.Duration < b.Base.Duration {
		errs = append(errs, field.Invalid(fldPath.Child("cap"), b.Cap.Duration.String(), codes.BackoffInvalid.Message(
			"backoff.cap must be at least backoff.base")))
	}
	if m := *b.Multiplier; m < 1 || m > 10 {
		errs = append(errs, field.Invalid(fldPath.Child("multiplier"), m, codes.OutOfRange.Message(
			"backoff.multiplier must be between 1 and 10")))
	}
	return errs
}

func validateRetryOn(r *RetryOn, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, c := range r.StatusCodes {
		if !httprules.IsRetryableStatus(c) {
			errs = append(errs, field.Invalid(fldPath.Child("statusCodes"), r.StatusCodes, codes.NonRetryableStatus.Message(
				"retryOn.statusCodes may hold only 429 and 5xx other than 501 and 505; other statuses never succeed on retry")))
			break
		}
	}
	for i, e := range r.Errors {
		switch e {
		case ConnectionRefused, ConnectionReset, Timeout, DNSFailure:
		default:
			errs = append(errs, field.NotSupported(fldPath.Child("errors").Index(i), e, supportedErrors))
		}
	}
	return errs
}

func validateIdempotency(s *RetryPolicySpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	tmpl := s.Idempotency.KeyTemplate
	if tmpl != nil {
		p := fldPath.Child("idempotency", "keyTemplate")
		if !wellFormedTemplate.MatchString(*tmpl) {
			errs = append(errs, field.Invalid(p, *tmpl, codes.InvalidKeyTemplate.Message(
				"idempotency.keyTemplate placeholders are {name} with letters, digits and underscores, and braces must pair")))
		}
		if !templatePlaceholder.MatchString(*tmpl) {
			errs = append(errs, field.Invalid(p, *tmpl, codes.UnstableIdempotencyKey.Message(
				"idempotency.keyTemplate has no {placeholder}, so every operation would share one key")))
		}
		if perAttemptPlaceholder.MatchString(*tmpl) {
			errs = append(errs, field.Invalid(p, *tmpl, codes.UnstableIdempotencyKey.Message(
				"idempotency.keyTemplate uses a per-attempt value ({attempt}, {random}, {uuid}, {now} or {timestamp}), so retries would carry new keys")))
		}
	}
	ambiguous := false
	for _, e := range s.RetryOn.Errors {
		ambiguous = ambiguous || e.IsAmbiguous()
	}
	idempotent := s.Target.Operation != nil && httprules.IsIdempotentOperation(*s.Target.Operation)
	if ambiguous && tmpl == nil && !idempotent {
		errs = append(errs, field.Invalid(fldPath.Child("retryOn", "errors"), s.RetryOn.Errors, codes.AmbiguousWithoutIdempotency.Message(
			"retryOn.errors has ConnectionReset or Timeout, which may follow an applied request; set idempotency.keyTemplate or use an idempotent method (GET, HEAD, PUT, DELETE, OPTIONS, TRACE)")))
	}
	return errs
}

func validateDeadlines(s *RetryPolicySpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	deadline := s.Deadline.Duration
	if deadline <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("deadline"), deadline.String(), codes.DeadlineInfeasible.Message(
			"deadline must be positive")))
	}
	if s.MaxAttempts > 1 && deadline <= s.MinRemaining.Duration {
		errs = append(errs, field.Invalid(fldPath.Child("deadline"), deadline.String(), codes.DeadlineInfeasible.Message(
			"deadline must exceed minRemaining, or no retry could ever start")))
	}
	if s.MaxAttempts > 1 && s.RetryAfter.MaxDelay.Duration >= deadline {
		errs = append(errs, field.Invalid(fldPath.Child("retryAfter", "maxDelay"), s.RetryAfter.MaxDelay.Duration.String(), codes.DeadlineInfeasible.Message(
			"retryAfter.maxDelay (default 3s) must be below deadline, or an honoured Retry-After would outlive the operation")))
	}
	if t := s.PerAttemptTimeout; t != nil && t.Duration > deadline {
		errs = append(errs, field.Invalid(fldPath.Child("perAttemptTimeout"), t.Duration.String(), codes.DeadlineInfeasible.Message(
			"perAttemptTimeout must not exceed deadline")))
	}
	return errs
}

func validateFallbackChannel(c *FallbackChannel, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !httprules.IsSecureEndpoint(c.Endpoint) {
		errs = append(errs, field.Invalid(fldPath.Child("endpoint"), c.Endpoint, codes.UntestedCompensationBlocked.Message(
			"fallback endpoint must be an https:// URL; secrets must not leave on an unencrypted channel")))
	}
	if c.Verified == nil || !*c.Verified {
		errs = append(errs, field.Invalid(fldPath.Child("verified"), c.Verified, codes.UntestedCompensationBlocked.Message(
			"fallback channel must be verified: true before operations may be routed to it")))
	}
	return errs
}
