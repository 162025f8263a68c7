package policyconfig

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/limits"
)

// ErrInvalidPayload is matched by every ParseError.
var ErrInvalidPayload = errors.New("invalid policy payload")

// ParseError says which field of a payload is wrong and why.
type ParseError struct {
	Field  string
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalidPayload, e.Field, e.Reason)
}

// Is matches ErrInvalidPayload.
func (e *ParseError) Is(target error) bool { return target == ErrInvalidPayload }

var (
	dnsLabel     = regexp.MustCompile(limits.DNS1123LabelPattern)
	dnsSubdomain = regexp.MustCompile(limits.DNS1123SubdomainPattern)
	eventsTopic  = regexp.MustCompile(limits.EventsTopicPattern)
)

func bad(field, format string, args ...any) error {
	return &ParseError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks every value the runtime relies on; Marshal and Parse call
// it. An Enforced payload is held to every single-object rule admission
// enforces (api/v1alpha1's CEL and Go validators): a pod trusts a payload no
// more than the API server would have trusted the spec.
func (p *Payload) Validate() error {
	if p.SchemaVersion != SchemaVersion {
		return bad("schemaVersion", "%q is not %q; upgrade the runtime or the controllers", p.SchemaVersion, SchemaVersion)
	}
	switch p.Enforcement.Mode {
	case Enforced:
	case NoRetry:
		if p.Enforcement.Reason == "" {
			return bad("enforcement.reason", "NoRetry needs a reason")
		}
	default:
		return bad("enforcement.mode", "%q is neither Enforced nor NoRetry", p.Enforcement.Mode)
	}
	pol := &p.Policy
	if err := validateIdentity(pol); err != nil {
		return err
	}
	// A key template that cannot render would stop every operation before
	// its first attempt, so it is refused in any mode and the pod keeps its
	// last good policy.
	if err := validateKeyTemplate(pol.KeyTemplate); err != nil {
		return err
	}
	if p.Enforcement.Mode == NoRetry {
		// One attempt whatever the rest says: a policy the controller
		// refused (even one that escaped CEL) must still reach its pods.
		return nil
	}
	for _, check := range []func(*Policy) error{
		validateAttempts, validateBackoff, validateDeadlines, validateRetryOn, validateHedging, validateIsolation, validateFallback,
	} {
		if err := check(pol); err != nil {
			return err
		}
	}
	if b := p.Budget; b != nil {
		if err := validateBudget(b); err != nil {
			return err
		}
		if b.Namespace == p.Policy.Namespace {
			// One form per budget: its own namespace is written as absent.
			return bad("budget.namespace", "%q is the policy's own namespace; leave it out", b.Namespace)
		}
	}
	if pol.MaxAttempts > 1 && p.Budget == nil {
		return bad("budget", "an Enforced policy that retries must carry its resolved budget")
	}
	return nil
}

// validateIdentity checks the names a pod serves and files the policy under.
func validateIdentity(pol *Policy) error {
	switch {
	case pol.Namespace == "" || pol.Name == "":
		return bad("policy.name", "namespace and name are required")
	case len(pol.Namespace) > limits.MaxDNSLabelLength || !dnsLabel.MatchString(pol.Namespace):
		return bad("policy.namespace", "%q is not a namespace name (a DNS-1123 label)", pol.Namespace)
	case len(ConfigMapName(pol.Name)) > limits.MaxObjectNameLength || !dnsSubdomain.MatchString(pol.Name):
		return bad("policy.name", "%q is not an object name (a DNS-1123 subdomain that fits %s)", pol.Name, ConfigMapPrefix)
	case pol.Service == "":
		return bad("policy.service", "required")
	case len(pol.Service) > limits.MaxDNSLabelLength || !dnsLabel.MatchString(pol.Service):
		return bad("policy.service", "%q is not a DNS-1123 label", pol.Service)
	}
	return nil
}

// CheckKeyTemplate reports why an idempotency key template cannot render one
// stable key per operation, as Parse would; nil when it can (or is empty).
func CheckKeyTemplate(tmpl string) error { return validateKeyTemplate(tmpl) }

func validateKeyTemplate(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	if len(tmpl) > limits.MaxKeyTemplateLength {
		return bad("policy.keyTemplate", "%d bytes, above %d", len(tmpl), limits.MaxKeyTemplateLength)
	}
	for _, problem := range httprules.KeyTemplateProblems(tmpl) {
		switch problem {
		case httprules.KeyTemplateMalformed:
			return bad("policy.keyTemplate", "%q: placeholders are {name} with letters, digits and underscores, and braces must pair", tmpl)
		case httprules.KeyTemplateConstant:
			return bad("policy.keyTemplate", "%q has no {placeholder}, so every operation would share one key", tmpl)
		case httprules.KeyTemplatePerAttempt:
			return bad("policy.keyTemplate", "%q uses a per-attempt value, so retries would carry new keys", tmpl)
		}
	}
	return nil
}

func validateAttempts(pol *Policy) error {
	switch {
	case pol.MaxAttempts < 1 || pol.MaxAttempts > limits.MaxAttemptsCeiling:
		return bad("policy.maxAttempts", "%d is outside 1–%d", pol.MaxAttempts, limits.MaxAttemptsCeiling)
	case pol.LeafAttempts < 0:
		return bad("policy.leafAttempts", "%d is negative", pol.LeafAttempts)
	case pol.MaxAttempts > 1 && !httprules.MayRetry(pol.Operation, pol.KeyTemplate != "", pol.RetryOnStatus, pol.RetryOnErrors):
		return bad("policy.maxAttempts", "%d attempts of %q, which has no key template and no idempotent method, "+
			"would replay an unsafe operation after failures that do not prove it never left", pol.MaxAttempts, pol.Operation)
	case len(pol.Operation) > limits.MaxOperationLength:
		return bad("policy.operation", "%d bytes, above %d", len(pol.Operation), limits.MaxOperationLength)
	case pol.IdempotencyHeader == "":
		return bad("policy.idempotencyHeader", "required")
	case len(pol.IdempotencyHeader) > limits.MaxHeaderLength || !httprules.IsHeaderToken(pol.IdempotencyHeader):
		return bad("policy.idempotencyHeader", "%q is not an HTTP field name (a token of at most %d bytes)", pol.IdempotencyHeader, limits.MaxHeaderLength)
	}
	return nil
}

func validateBackoff(pol *Policy) error {
	if pol.MaxAttempts == 1 && pol.Backoff == (Backoff{}) {
		// A single attempt never waits: an absent backoff means no retry,
		// as admission's minimal policy has none (docs/configmap-format.md).
		return nil
	}
	switch b := &pol.Backoff; {
	case !slices.Contains(backoff.Jitters, backoff.Jitter(b.Jitter)):
		return bad("policy.backoff.jitter", "%q is not one of %v", b.Jitter, backoff.Jitters)
	case b.Base <= 0:
		return bad("policy.backoff.base", "must be positive")
	case b.Cap < b.Base:
		return bad("policy.backoff.cap", "%s is below base %s", b.Cap.D(), b.Base.D())
	case b.Multiplier < 1 || b.Multiplier > limits.MaxBackoffMultiplier:
		return bad("policy.backoff.multiplier", "%d is outside 1–%d", b.Multiplier, limits.MaxBackoffMultiplier)
	}
	return nil
}

func validateDeadlines(pol *Policy) error {
	retries := pol.MaxAttempts > 1
	switch {
	case pol.Deadline <= 0:
		return bad("policy.deadline", "must be positive")
	case pol.MinRemaining < 0 || pol.PerAttemptTimeout < 0 || pol.RetryAfterMaxDelay < 0:
		return bad("policy", "durations must not be negative")
	case retries && pol.MinRemaining >= pol.Deadline:
		return bad("policy.minRemaining", "%s is not below deadline %s, so no retry could ever start", pol.MinRemaining.D(), pol.Deadline.D())
	case retries && pol.RetryAfterMaxDelay >= pol.Deadline:
		return bad(
			"policy.retryAfterMaxDelay",
			"%s is not below deadline %s, so an honoured Retry-After would outlive the operation",
			pol.RetryAfterMaxDelay.D(),
			pol.Deadline.D(),
		)
	case pol.PerAttemptTimeout > pol.Deadline:
		return bad("policy.perAttemptTimeout", "%s exceeds deadline %s", pol.PerAttemptTimeout.D(), pol.Deadline.D())
	}
	return nil
}

// validateHedging refuses what admission refuses: a hedge of an operation
// that is not safe to replay, more hedges than maxAttempts holds, a delay
// that is not positive or not below the deadline.
func validateHedging(pol *Policy) error {
	h := pol.Hedging
	if h == nil {
		return nil
	}
	switch {
	case h.MaxHedges < 1 || h.MaxHedges > limits.MaxHedges:
		return bad("policy.hedging.maxHedges", "%d is outside 1–%d", h.MaxHedges, limits.MaxHedges)
	case h.MaxHedges >= pol.MaxAttempts:
		return bad("policy.hedging.maxHedges", "%d hedges and the attempt are above maxAttempts %d; they count together",
			h.MaxHedges, pol.MaxAttempts)
	case !httprules.IsReplaySafe(pol.Operation, pol.KeyTemplate != ""):
		return bad("policy.hedging", "%q has no key template and no idempotent method; a hedge would duplicate an attempt that may be applied", pol.Operation)
	case (h.Delay != 0) == (h.Percentile != 0):
		return bad("policy.hedging", "needs exactly one of delay and percentile")
	case h.Delay < 0 || h.Floor < 0 || h.Cap < 0:
		return bad("policy.hedging", "durations must not be negative")
	case h.Delay != 0 && h.Delay >= pol.Deadline:
		return bad("policy.hedging.delay", "%s is not below deadline %s", h.Delay.D(), pol.Deadline.D())
	case h.Delay == 0 && (h.Percentile < limits.MinHedgePercentile || h.Percentile > limits.MaxHedgePercentile):
		return bad("policy.hedging.percentile", "%d is outside %d–%d", h.Percentile, limits.MinHedgePercentile, limits.MaxHedgePercentile)
	case h.Delay == 0 && (h.Floor <= 0 || h.Cap < h.Floor):
		return bad("policy.hedging.cap", "floor %s and cap %s: the floor must be positive and the cap at least the floor", h.Floor.D(), h.Cap.D())
	case h.Delay == 0 && h.Cap >= pol.Deadline:
		return bad("policy.hedging.cap", "%s is not below deadline %s", h.Cap.D(), pol.Deadline.D())
	case h.Delay != 0 && (h.Floor != 0 || h.Cap != 0):
		return bad("policy.hedging", "floor and cap go with percentile only")
	}
	return nil
}

func validateRetryOn(pol *Policy) error {
	if n := len(pol.RetryOnStatus); n > limits.MaxRetryOnStatusCodes {
		return bad("policy.retryOnStatusCodes", "%d codes, above %d", n, limits.MaxRetryOnStatusCodes)
	}
	for i, c := range pol.RetryOnStatus {
		if !httprules.IsRetryableStatus(c) {
			return bad("policy.retryOnStatusCodes", "%d must never be retried", c)
		}
		if slices.Contains(pol.RetryOnStatus[:i], c) {
			return bad("policy.retryOnStatusCodes", "%d is listed twice", c)
		}
	}
	if n := len(pol.RetryOnErrors); n > limits.MaxRetryOnErrors {
		return bad("policy.retryOnErrors", "%d errors, above %d", n, limits.MaxRetryOnErrors)
	}
	for i, e := range pol.RetryOnErrors {
		if !slices.Contains(limits.TransportErrors, e) {
			return bad("policy.retryOnErrors", "%q is not one of %v", e, limits.TransportErrors)
		}
		if slices.Contains(pol.RetryOnErrors[:i], e) {
			return bad("policy.retryOnErrors", "%q is listed twice", e)
		}
	}
	return nil
}

func validateIsolation(pol *Policy) error {
	switch {
	case !slices.Contains(limits.Criticalities, pol.Criticality):
		return bad("policy.criticality", "%q is not one of %v", pol.Criticality, limits.Criticalities)
	case pol.Layer == "" || len(pol.Layer) > limits.MaxDNSLabelLength:
		return bad("policy.layer", "needs 1–%d bytes", limits.MaxDNSLabelLength)
	case len(pol.Parent) > limits.MaxObjectNameLength:
		return bad("policy.parent", "%d bytes, above %d", len(pol.Parent), limits.MaxObjectNameLength)
	case len(pol.Budget) > limits.MaxObjectNameLength:
		return bad("policy.budgetRef", "%d bytes, above %d", len(pol.Budget), limits.MaxObjectNameLength)
	case pol.EventsTopic != "" && (len(pol.EventsTopic) > limits.MaxEventsTopicLength || !eventsTopic.MatchString(pol.EventsTopic)):
		return bad("policy.eventsTopic", "%q is not a Kafka topic name of at most %d bytes", pol.EventsTopic, limits.MaxEventsTopicLength)
	}
	if cp := pol.ConnectionPool; cp != nil {
		if len(cp.Name) > limits.MaxDNSLabelLength || !dnsLabel.MatchString(cp.Name) {
			return bad("policy.connectionPool.name", "%q is not a DNS-1123 label", cp.Name)
		}
		if cp.MaxConnections < 1 || cp.MaxConnections > limits.MaxConnectionsPerPool {
			return bad("policy.connectionPool.maxConnections", "%d is outside 1–%d", cp.MaxConnections, limits.MaxConnectionsPerPool)
		}
	}
	return nil
}

// validateFallback refuses what admission refuses (ERR_UNTESTED_COMPENSATION_BLOCKED);
// the runtime still re-checks each channel before routing to it.
func validateFallback(pol *Policy) error {
	if n := len(pol.Fallback); n > limits.MaxFallbackChannels {
		return bad("policy.fallback", "%d channels, above %d", n, limits.MaxFallbackChannels)
	}
	for i, f := range pol.Fallback {
		at := fmt.Sprintf("policy.fallback[%d]", i)
		switch {
		case f.Name == "" || len(f.Name) > limits.MaxDNSLabelLength:
			return bad(at+".name", "needs 1–%d bytes", limits.MaxDNSLabelLength)
		case slices.ContainsFunc(pol.Fallback[:i], func(g FallbackChannel) bool { return g.Name == f.Name }):
			return bad(at+".name", "%q is listed twice", f.Name)
		case len(f.Endpoint) > limits.MaxFallbackEndpointLength || !httprules.IsSecureEndpoint(f.Endpoint):
			return bad(
				at+".endpoint",
				"%q is not an https URL of at most %d bytes; secrets must not leave on an unencrypted channel",
				f.Endpoint,
				limits.MaxFallbackEndpointLength,
			)
		case !f.Verified:
			return bad(at+".verified", "an unverified channel must not receive operations")
		}
	}
	return nil
}

func validateBudget(b *Budget) error {
	switch {
	case b.Name == "" || len(b.Name) > limits.MaxObjectNameLength:
		return bad("budget.name", "needs 1–%d bytes", limits.MaxObjectNameLength)
	case b.Namespace != "" && (len(b.Namespace) > limits.MaxDNSLabelLength || !dnsLabel.MatchString(b.Namespace)):
		return bad("budget.namespace", "%q is not a namespace name (a DNS-1123 label)", b.Namespace)
	case b.RetryPercent < 1 || b.RetryPercent > limits.MaxBudgetRetryPercent:
		return bad("budget.retryPercent", "%d is outside 1–%d", b.RetryPercent, limits.MaxBudgetRetryPercent)
	case b.Window.D() < limits.MinBudgetWindow || b.Window.D() > limits.MaxBudgetWindow:
		return bad("budget.window", "%s is outside %s–%s", b.Window.D(), limits.MinBudgetWindow, limits.MaxBudgetWindow)
	case b.MaxTokens < 1 || b.MaxTokens > limits.MaxBudgetTokens:
		return bad("budget.maxTokens", "%d is outside 1–%d", b.MaxTokens, limits.MaxBudgetTokens)
	case b.MinRetriesPerSecond < 0 || b.MinRetriesPerSecond > limits.MaxBudgetMinRetriesPerSecond:
		return bad("budget.minRetriesPerSecond", "%d is outside 0–%d", b.MinRetriesPerSecond, limits.MaxBudgetMinRetriesPerSecond)
	case b.Partitions < 1 || b.Partitions > limits.MaxBudgetPartitions:
		return bad("budget.partitions", "%d is outside 1–%d", b.Partitions, limits.MaxBudgetPartitions)
	}
	if m := b.MaxRetriesPerSecond; m != nil {
		switch {
		case *m < 0 || *m > limits.MaxBudgetRetriesPerSecond:
			return bad("budget.maxRetriesPerSecond", "%d is outside 0–%d", *m, limits.MaxBudgetRetriesPerSecond)
		case b.MinRetriesPerSecond > *m:
			// The floor never grants past the hard cap; a payload that says
			// otherwise was not written from an admitted budget.
			return bad("budget.minRetriesPerSecond", "%d is above maxRetriesPerSecond %d", b.MinRetriesPerSecond, *m)
		}
	}
	if err := validateBudgetIdentity(b); err != nil {
		return err
	}
	return nil
}
