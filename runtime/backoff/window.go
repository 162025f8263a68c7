// Package backoff computes retry delays: capped exponential windows and the
// Full, Equal and Decorrelated jitter drawn from them. It has no dependencies
// so that the runtime, the controllers and the webhooks share one formula.
package backoff

import "time"

// Window is the backoff window before retry number retry (1 for the first
// retry, after the first attempt failed): min(cap, base·multiplier^retry).
// The seed's schedule follows: base 100ms ×2 gives 200ms before the second
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
