package policyconfig

import (
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/retryguard/retryguard/api/httprules"
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
	jitters        = []string{"Full", "Equal", "Decorrelated"}
	transportErrs  = []string{"ConnectionRefused", "ConnectionReset", "Timeout", "DNSFailure"}
	criticalities  = []string{"Critical", "Standard"}
	maxAttemptsCap = int32(3)
)

// Validate checks every value the runtime relies on; Marshal and Parse call it.
func (p *Payload) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ParseError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
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
	switch {
	case pol.Namespace == "" || pol.Name == "":
		return bad("policy.name", "namespace and name are required")
	case pol.Service == "":
		return bad("policy.service", "required")
	}
	if p.Enforcement.Mode == NoRetry {
		// One attempt whatever the rest says: a policy the controller
		// refused (even one that escaped CEL) must still reach its pods.
		return nil
	}
	switch {
	case pol.MaxAttempts < 1 || pol.MaxAttempts > maxAttemptsCap:
		return bad("policy.maxAttempts", "%d is outside 1–%d", pol.MaxAttempts, maxAttemptsCap)
	case pol.LeafAttempts < 0:
		return bad("policy.leafAttempts", "%d is negative", pol.LeafAttempts)
	case !slices.Contains(jitters, pol.Backoff.Jitter):
		return bad("policy.backoff.jitter", "%q is not one of %v", pol.Backoff.Jitter, jitters)
	case pol.Backoff.Base <= 0:
		return bad("policy.backoff.base", "must be positive")
	case pol.Backoff.Cap < pol.Backoff.Base:
		return bad("policy.backoff.cap", "%s is below base %s", pol.Backoff.Cap.D(), pol.Backoff.Base.D())
	case pol.Backoff.Multiplier < 1 || pol.Backoff.Multiplier > 10:
		return bad("policy.backoff.multiplier", "%d is outside 1–10", pol.Backoff.Multiplier)
	case pol.Deadline <= 0:
		return bad("policy.deadline", "must be positive")
	case pol.MinRemaining < 0 || pol.PerAttemptTimeout < 0 || pol.RetryAfterMax < 0:
		return bad("policy", "durations must not be negative")
	case pol.IdempotencyHeader == "":
		return bad("policy.idempotencyHeader", "required")
	case !slices.Contains(criticalities, pol.Criticality):
		return bad("policy.criticality", "%q is not one of %v", pol.Criticality, criticalities)
	}
	for _, c := range pol.RetryOnStatus {
		if !httprules.IsRetryableStatus(c) {
			return bad("policy.retryOnStatusCodes", "%d must never be retried", c)
		}
	}
	for _, e := range pol.RetryOnErrors {
		if !slices.Contains(transportErrs, e) {
			return bad("policy.retryOnErrors", "%q is not one of %v", e, transportErrs)
		}
	}
	if cp := pol.ConnectionPool; cp != nil && (cp.Name == "" || cp.MaxConnections < 1 || cp.MaxConnections > 1000) {
		return bad("policy.connectionPool", "needs a name and 1–1000 connections")
	}
	for i, f := range pol.Fallback {
		if f.Name == "" || f.Endpoint == "" {
			return bad(fmt.Sprintf("policy.fallback[%d]", i), "needs a name and an endpoint")
		}
		// Unsafe channels are kept, not refused here: the runtime refuses to
		// route to them with ERR_UNTESTED_COMPENSATION_BLOCKED, which is
		// the error a caller must see.
		if _, err := url.Parse(f.Endpoint); err != nil {
			return bad(fmt.Sprintf("policy.fallback[%d].endpoint", i), "%v", err)
		}
	}
	if b := p.Budget; b != nil {
		switch {
		case b.Name == "":
			return bad("budget.name", "required")
		case b.RetryPercent < 1 || b.RetryPercent > 100:
			return bad("budget.retryPercent", "%d is outside 1–100", b.RetryPercent)
		case b.Window <= 0:
			return bad("budget.window", "must be positive")
		case b.MaxTokens < 1 || b.MaxTokens > 1000:
			return bad("budget.maxTokens", "%d is outside 1–1000", b.MaxTokens)
		case b.MinRetriesPerSecond < 0:
			return bad("budget.minRetriesPerSecond", "%d is negative", b.MinRetriesPerSecond)
		case b.Partitions < 1:
			return bad("budget.partitions", "%d is below 1", b.Partitions)
		}
	}
	if p.Enforcement.Mode == Enforced && pol.MaxAttempts > 1 && p.Budget == nil {
		return bad("budget", "an Enforced policy that retries must carry its resolved budget")
	}
	return nil
}
