package webhooks

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/retryguard/retryguard/runtime/codes"
)

// Bounds on the work of RetryPolicy reviews (docs/webhooks.md, bounded
// work): however many callers reach the webhook, at most
// MaxConcurrentReviews judge at once, so that each finishes in its own
// few milliseconds instead of sharing the cores with every other caller,
// and a review that waits longer than ReviewQueueWait for a turn is
// refused at once, failing closed, rather than left to its timeout.
const (
	// MaxConcurrentReviews is how many RetryPolicy reviews judge at once:
	// twice the two cores a manager is usually given, so that one waiting
	// on the cache does not idle a core.
	MaxConcurrentReviews = 4
	// ReviewQueueWait is the longest a review waits for a turn. With
	// ReviewBudget it leaves the judgement two seconds before the
	// webhook's 5 s timeout.
	ReviewQueueWait = time.Second
)

// gate admits at most cap(g) holders at a time. It is safe for concurrent
// use; a nil gate admits everyone at once.
type gate chan struct{}

// enter waits for a turn, at most wait and never past ctx. It returns the
// function that gives the turn back, or nil when no turn came.
func (g gate) enter(ctx context.Context, wait time.Duration) (leave func()) {
	if g == nil {
		return func() {}
	}
	select {
	case g <- struct{}{}: // a free turn: no timer
		return func() { <-g }
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case g <- struct{}{}:
		return func() { <-g }
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// errBusy refuses a review that found no turn within ReviewQueueWait.
func errBusy() error {
	return apierrors.NewTooManyRequests(codes.AdmissionBusy.Message(fmt.Sprintf(
		"%d RetryPolicy reviews are being judged and this one waited %s for a turn; it was refused, nothing was stored, "+
			"and the same request may be sent again (admission fails closed)", MaxConcurrentReviews, ReviewQueueWait)), 1)
}

// errOutOfTime refuses a review that could not be judged within ReviewBudget.
func errOutOfTime() error {
	return apierrors.NewTimeoutError(codes.AdmissionBusy.Message(fmt.Sprintf(
		"the review could not be judged within its %s budget; it was refused, nothing was stored, "+
			"and the same request may be sent again (admission fails closed)", ReviewBudget)), 1)
}
