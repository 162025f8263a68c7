package v1alpha1

import (
	"time"

	"k8s.io/utils/ptr"
)

// mustDuration turns one of this package's default literals into a Duration.
func mustDuration(s string) *Duration {
	d := Duration(s)
	if !d.Valid() {
		panic("v1alpha1: bad default duration " + s) // a programming error caught by tests
	}
	return &d
}

// WithDefaults returns a deep copy of the spec with every absent optional
// field set to the default the API server would apply. Go callers (the
// validators, the controllers, unit tests) see the same object CEL sees.
// retryAfter.maxDelay stays absent when it is: its default depends on the
// deadline (RetryAfterMaxDelay).
func (s *RetryPolicySpec) WithDefaults() RetryPolicySpec {
	out := *s.DeepCopy()
	if out.Backoff == nil {
		out.Backoff = &Backoff{}
	}
	if out.Backoff.Jitter == nil {
		out.Backoff.Jitter = ptr.To(DefaultBackoffJitter)
	}
	if out.Backoff.Base == nil {
		out.Backoff.Base = mustDuration(DefaultBackoffBase)
	}
	if out.Backoff.Cap == nil {
		out.Backoff.Cap = mustDuration(DefaultBackoffCap)
	}
	if out.Backoff.Multiplier == nil {
		out.Backoff.Multiplier = ptr.To(DefaultBackoffMultiplier)
	}
	if out.Layer.HiddenAttempts == nil {
		out.Layer.HiddenAttempts = ptr.To(DefaultHiddenAttempts)
	}
	if out.MinRemaining == nil {
		out.MinRemaining = mustDuration(DefaultMinRemaining)
	}
	if out.RetryAfter == nil {
		out.RetryAfter = &RetryAfter{}
	}
	if out.RetryOn == nil {
		out.RetryOn = &RetryOn{}
	}
	if out.RetryOn.StatusCodes == nil {
		out.RetryOn.StatusCodes = append([]int32(nil), DefaultRetryOnStatusCodes...)
	}
	if out.RetryOn.Errors == nil {
		out.RetryOn.Errors = append([]TransportError(nil), DefaultRetryOnErrors...)
	}
	if out.Idempotency == nil {
		out.Idempotency = &Idempotency{}
	}
	if out.Idempotency.Header == nil {
		out.Idempotency.Header = ptr.To(DefaultIdempotencyHeader)
	}
	if out.Criticality == nil {
		out.Criticality = ptr.To(DefaultCriticality)
	}
	if l := hedgeLatency(&out); l != nil {
		if l.Floor == nil {
			l.Floor = mustDuration(DefaultHedgeFloor)
		}
		if l.Cap == nil {
			l.Cap = mustDuration(DefaultHedgeCap)
		}
	}
	return out
}

// WithDefaults returns a deep copy of the spec with every absent optional
// field set to the default the API server would apply.
func (s *RetryBudgetSpec) WithDefaults() RetryBudgetSpec {
	out := *s.DeepCopy()
	if out.Window == nil {
		out.Window = mustDuration(DefaultBudgetWindow)
	}
	if out.MaxTokens == nil {
		out.MaxTokens = ptr.To(DefaultBudgetMaxTokens)
	}
	if out.MinRetriesPerSecond == nil {
		out.MinRetriesPerSecond = ptr.To(DefaultBudgetMinRetriesPerSecond)
	}
	if out.Partitions == nil {
		out.Partitions = ptr.To(DefaultBudgetPartitions)
	}
	return out
}

// hedgeLatency is the spec's hedging.latency, nil when either is absent.
func hedgeLatency(s *RetryPolicySpec) *HedgeLatency {
	if s.Hedging == nil {
		return nil
	}
	return s.Hedging.Latency
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
