// Package backoff computes retry delays: capped exponential windows and the
// Full, Equal and Decorrelated jitter drawn from them, and CanStart, the rule
// that says whether the deadline left can hold the next attempt. It depends
// on the standard library alone, so that the runtime, the controllers and
// the webhooks share one formula and one rule.
package backoff

import "time"

// Window is the backoff window before retry number retry (1 for the first
// retry, after the first attempt failed): min(cap, base·multiplier^retry).
// The spec's schedule follows: base 100ms ×2 gives 200ms before the second
// attempt and 400ms before the third. It saturates at cap instead of
// overflowing, and a non-positive base or cap gives 0.
func Window(base, cap time.Duration, multiplier int32, retry int) time.Duration {
	if base <= 0 || cap <= 0 {
		return 0
	}
	if multiplier < 1 {
		multiplier = 1
	}
	w := base
	for i := 0; i < retry && w < cap; i++ {
		if w > cap/time.Duration(multiplier) {
			return cap
		}
		w *= time.Duration(multiplier)
	}
	return min(w, cap)
}

// DecorrelatedMax is the largest delay Decorrelated jitter can draw before
// retry number retry: each draw is at most three times the previous one,
// starting from base, and never above cap.
func DecorrelatedMax(base, cap time.Duration, retry int) time.Duration {
	return Window(base, cap, 3, retry)
}

// CanStart reports whether a retry may start with left of the deadline
// remaining: enough for the attempt (perAttemptTimeout, when the policy sets
// one) and for minRemaining. RG-LOAD fixes the boundary: 1,500 ms left holds a 1,000 ms
// wait and a 500 ms attempt (500 ms left when the attempt starts: allowed),
// and 1,499 ms does not. MC-ST-01's "remaining > 500 ms" is read with that
// boundary: a retry never starts with less than minRemaining left, and one
// that starts with exactly minRemaining left is the RG-LOAD fixture.
// It is the one deadline-feasibility rule: the runtime's Decide applies it
// to the time left once the wait is over (and Do again when the wait has
// ended, on the clock), and admission's worst-case schedule
// (api/policygraph) predicts with it, so the two cannot disagree.
func CanStart(left, perAttemptTimeout, minRemaining time.Duration) bool {
	return left >= perAttemptTimeout && left >= minRemaining
}
