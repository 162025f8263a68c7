package retry

import (
	"sync"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
)

// The recovery drill's baseline (docs/drill.md, docs/metrics.md "Recovery
// lag"): the dependency is back once fewer than 1 in recoveryFaultRatio of a
// second's primaries fail transiently, and retries are back to baseline at
// fewer than recoveryBaselineRetries a second, or no more than the second's own
// failed primaries call for (a dependency's baseline errors, retried).
const (
	recoveryFaultRatio      = 100 // 1%
	recoveryBaselineRetries = 2
	recoveryWindow          = time.Second
)

// recoveryBounds are retryguard_recovery_seconds' upper bounds: the drill's
// 2.5 s goal, its 3 s report bound and the 5 s past which the lag alerts.
var recoveryBounds = [...]time.Duration{500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 3 * time.Second,
	5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute}

// recovery watches one policy's pod-side view of a fault's end, by 1 s
// windows on the executor's clock: a window is faulty when at least 1% of its
// primaries failed transiently (or ambiguously). The fault has ended at the
// start of the first window after a faulty one that is not faulty; recovery is
// complete at the start of the first such window whose retries are at
// baseline (fewer than 2, or no more than its faults).
// The time between the two is the recovery, observed into the histogram;
// while retries stay at or above 2 a second past the fault's end, lag is how
// long it has been. It is touched only on the slow path (a failed primary, a
// retry) and when metrics are collected, never by a first-try success, whose
// count it reads from the policy's atomics. Safe for concurrent use.
//
// Successes are read when a window closes, so a window that closes late (the
// next slow-path event or scrape) counts the successes since its end too: at
// a fault's end the end is seen up to one window early, never late.
type recovery struct {
	mu    sync.Mutex
	clock clock.Clock
	// window is the current window's start (zero before the first event);
	// firstTry the first-try successes when it started; primaries (failed
	// first attempts), faults and retries are counted in it.
	window                     time.Time
	firstTry                   uint64
	primaries, faults, retries uint64
	// faulted: a faulty window was seen since the last recovery; healed is
	// the fault's end, zero while it lasts.
	faulted bool
	healed  time.Time
	lag     time.Duration
	done    durations // completed recoveries
}

// roll closes every window that ended by now; firstTry is the policy's
// first-try successes so far. Called with mu held.
func (r *recovery) roll(now time.Time, firstTry uint64) {
	if r.window.IsZero() {
		r.window, r.firstTry = now, firstTry
		return
	}
	for closed := 0; !now.Before(r.window.Add(recoveryWindow)); closed++ {
		if closed == 2 {
			// Every later window is empty, as the second was: nothing changes.
			r.window, r.firstTry = now, firstTry
			break
		}
		primaries := r.primaries + firstTry - r.firstTry
		switch {
		case r.faults > 0 && r.faults*recoveryFaultRatio >= primaries:
			r.faulted, r.healed, r.lag = true, time.Time{}, 0
		case !r.faulted:
		default:
			if r.healed.IsZero() {
				r.healed = r.window
			}
			if r.retries >= recoveryBaselineRetries && r.retries > r.faults {
				r.lag = r.window.Add(recoveryWindow).Sub(r.healed)
			} else {
				r.done.observe(recoveryBounds[:], r.window.Sub(r.healed))
				r.faulted, r.healed, r.lag = false, time.Time{}, 0
			}
		}
		r.window, r.firstTry = r.window.Add(recoveryWindow), firstTry
		r.primaries, r.faults, r.retries = 0, 0, 0
	}
}

// primaryFailed counts a failed first attempt, a fault when its class is
// one the dependency answers for.
func (pm *policyMetrics) primaryFailed(c Class, now time.Time) {
	var fault uint64
	if c == Transient || c == Ambiguous {
		fault = 1
	}
	pm.addToWindow(now, 1, fault, 0)
}

// retried counts a retry as its attempt starts.
func (pm *policyMetrics) retried(now time.Time) { pm.addToWindow(now, 0, 0, 1) }

// addToWindow closes the windows that ended by now and counts into the current one.
func (pm *policyMetrics) addToWindow(now time.Time, primaries, faults, retries uint64) {
	if pm == nil {
		return
	}
	r := &pm.recovery
	r.mu.Lock()
	defer r.mu.Unlock()
	r.roll(now, pm.firstTry.count())
	r.primaries += primaries
	r.faults += faults
	r.retries += retries
}

// recoveryNow closes the windows that ended by the clock's now and returns
// the ongoing lag and a copy of the completed recoveries.
func (pm *policyMetrics) recoveryNow() (time.Duration, *durations) {
	r := &pm.recovery
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clock != nil && !r.window.IsZero() {
		r.roll(r.clock.Now(), pm.firstTry.count())
	}
	return r.lag, r.done.plus(new(durations), len(recoveryBounds))
}
