package policygraph

import (
	"fmt"
	"strings"
	"time"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/backoff"
)

// Schedule is a policy's worst case: every attempt takes perAttemptTimeout
// and every backoff draws its maximum.
type Schedule struct {
	// Backoffs are the largest waits before attempts 2, 3, ...
	Backoffs []time.Duration
	// PerAttemptTimeout is the policy's perAttemptTimeout, or zero when it sets none.
	PerAttemptTimeout time.Duration
	// Deadline and MinRemaining are the policy's.
	Deadline, MinRemaining time.Duration
	// FeasibleAttempts is how many attempts the runtime can start in the
	// worst case: a retry needs remaining ≥ wait + attempt cost and
	// remaining > minRemaining.
	FeasibleAttempts int32
	// Duration is the worst-case elapsed time, bounded by the deadline. With
	// no perAttemptTimeout one attempt may use the whole deadline.
	Duration time.Duration
}

// MaxBackoff is the largest wait before retry number retry (1-based) that
// the policy's jitter can draw.
func MaxBackoff(s *v1.RetryPolicySpec, retry int) time.Duration {
	d := s.WithDefaults()
	return maxBackoff(&d, retry)
}

// maxBackoff is MaxBackoff for a spec whose defaults are already applied.
func maxBackoff(d *v1.RetryPolicySpec, retry int) time.Duration {
	base, capd := d.Backoff.Base.Duration(), d.Backoff.Cap.Duration()
	if *d.Backoff.Jitter == v1.JitterDecorrelated {
		return backoff.DecorrelatedMax(base, capd, retry)
	}
	return backoff.Window(base, capd, *d.Backoff.Multiplier, retry)
}

// WorstCase computes the worst-case schedule of a policy.
func WorstCase(spec *v1.RetryPolicySpec) Schedule {
	d := spec.WithDefaults()
	s := Schedule{Deadline: d.Deadline.Duration(), MinRemaining: d.MinRemaining.Duration()}
	if d.PerAttemptTimeout != nil {
		s.PerAttemptTimeout = d.PerAttemptTimeout.Duration()
	}
	var elapsed time.Duration
	for k := int32(1); k <= d.MaxAttempts; k++ {
		if k > 1 {
			wait := maxBackoff(&d, int(k-1))
			s.Backoffs = append(s.Backoffs, wait)
			// The runtime's own rule, applied to the worst case: the wait
			// must leave the attempt's cost and the reserve.
			if !backoff.CanStart(s.Deadline-elapsed-wait, s.PerAttemptTimeout, s.MinRemaining) {
				break
			}
			elapsed += wait
		}
		elapsed += s.PerAttemptTimeout
		s.FeasibleAttempts = k
	}
	s.Duration = min(elapsed, s.Deadline)
	if s.PerAttemptTimeout == 0 {
		s.Duration = s.Deadline
	}
	return s
}

// Warning explains why fewer than want attempts can run.
func (s Schedule) Warning(want int32) string {
	waits := make([]string, len(s.Backoffs))
	for i, b := range s.Backoffs {
		waits[i] = b.String()
	}
	cost := "attempts of unbounded cost"
	if s.PerAttemptTimeout > 0 {
		cost = fmt.Sprintf("attempts of up to %s (perAttemptTimeout)", s.PerAttemptTimeout)
	}
	return fmt.Sprintf("deadline: only %d of %d attempts can run in the worst case: %s with waits of up to %s do not fit in deadline %s with minRemaining %s",
		s.FeasibleAttempts, want, cost, strings.Join(waits, ", "), s.Deadline, s.MinRemaining)
}
