package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter names a way of drawing a delay from a backoff window: the one home of
// the names backoff.jitter is written with, which the CRD's JitterMode and the
// payload parser take from here.
type Jitter string

// The jitters a policy may choose. None is not one: admission refuses it
// (ERR_JITTER_REQUIRED), so a policy without jitter never reaches the runtime.
const (
	Full         Jitter = "Full"
	Equal        Jitter = "Equal"
	Decorrelated Jitter = "Decorrelated"
)

// Jitters are the jitters a payload may carry.
var Jitters = []Jitter{Full, Equal, Decorrelated}

// Floor is the shortest delay ever drawn: a retry is never immediate.
const Floor = time.Millisecond

// Rand returns a uniform integer in [0, n). rand.Int64N (the default) is
// safe for concurrent use; tests pass a seeded source.
type Rand func(n int64) int64

// Strategy draws delays for one policy. It is immutable and safe for
// concurrent use.
type Strategy struct {
	Jitter     Jitter
	Base, Cap  time.Duration
	Multiplier int32
	Rand       Rand
}

// Delay draws the wait before retry number retry (1 for the first retry).
// prev is the previous delay drawn for the same operation (Decorrelated
// uses it; zero on the first retry).
//
//   - Full: uniform over [Floor, min(cap, base·multiplier^retry)].
//   - Equal: half the window plus uniform over the other half.
//   - Decorrelated: uniform over [base, 3·prev], capped.
func (s Strategy) Delay(retry int, prev time.Duration) time.Duration {
	r := s.Rand
	if r == nil {
		r = rand.Int64N
	}
	var d time.Duration
	switch s.Jitter {
	case Equal:
		w := Window(s.Base, s.Cap, s.Multiplier, retry)
		half := w / 2
		d = half + uniform(r, 0, w-half)
	case Decorrelated:
		if prev < s.Base {
			prev = s.Base
		}
		d = min(s.Cap, uniform(r, s.Base, 3*prev))
	default: // Full
		d = uniform(r, Floor, Window(s.Base, s.Cap, s.Multiplier, retry))
	}
	return max(d, Floor)
}

// uniform draws from [lo, hi] (lo when hi ≤ lo).
func uniform(r Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r(int64(hi-lo)+1))
}
