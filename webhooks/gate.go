package webhooks

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/retryguard/retryguard/contract/codes"
)

// Bounds on the work of RetryPolicy reviews (docs/webhooks.md, bounded
// work): however many callers reach the webhook, at most
// MaxConcurrentReviews judge at once, so that each finishes in its own
// few milliseconds instead of sharing the cores with every other caller,
// and a review that waits longer than ReviewQueueWait for a turn is
// refused at once, failing closed, rather than left to its timeout. The
// turns are shared fairly between namespaces, as API Priority and Fairness
// shares a priority level's seats between flows: one namespace's reviews
// hold at most MaxConcurrentReviewsPerNamespace turns, and a turn given
// back goes to the waiting namespace that holds the fewest, so a tenant
// flooding the webhook with slow reviews waits behind itself, not others.
const (
	// MaxConcurrentReviews is how many RetryPolicy reviews judge at once:
	// twice the two cores a manager is usually given, so that one waiting
	// on the cache does not idle a core.
	MaxConcurrentReviews = 4
	// MaxConcurrentReviewsPerNamespace is how many of those turns one
	// namespace's reviews hold at once: half, so that one flooding
	// namespace always leaves turns free for every other.
	MaxConcurrentReviewsPerNamespace = MaxConcurrentReviews / 2
	// ReviewQueueWait is the longest a review waits for a turn. With
	// ReviewBudget it leaves the judgement two seconds before the
	// webhook's 5 s timeout.
	ReviewQueueWait = time.Second
)

// gate admits at most turns holders at a time, at most perNamespace of them
// from one namespace, and gives a returned turn to the eligible waiter of
// the namespace holding the fewest (the earliest among equals). It is safe
// for concurrent use; a nil gate admits everyone at once.
type gate struct {
	mu           sync.Mutex
	free         int
	perNamespace int
	held         map[string]int       // turns held, by namespace; no zeros
	waiting      map[string][]*waiter // in arrival order, by namespace; no empty queues
	arrivals     uint64
}

// waiter is a review waiting for a turn; turn is closed when it is given one.
type waiter struct {
	namespace string
	arrival   uint64
	turn      chan struct{}
	granted   bool
}

func newGate(turns, perNamespace int) *gate {
	return &gate{free: turns, perNamespace: perNamespace, held: map[string]int{}, waiting: map[string][]*waiter{}}
}

// enter waits for a turn for a review of namespace, at most wait and never
// past ctx. It returns the function that gives the turn back, or nil when
// no turn came.
func (g *gate) enter(ctx context.Context, namespace string, wait time.Duration) (leave func()) {
	if g == nil {
		return func() {}
	}
	leave = func() { g.leave(namespace) }
	g.mu.Lock()
	// A free turn means no waiter could take it (leave gives each one
	// away at once), so one within its namespace's share is not
	// overtaking anyone: no timer.
	if g.free > 0 && g.held[namespace] < g.perNamespace {
		g.take(namespace)
		g.mu.Unlock()
		return leave
	}
	g.arrivals++
	w := &waiter{namespace: namespace, arrival: g.arrivals, turn: make(chan struct{})}
	g.waiting[namespace] = append(g.waiting[namespace], w)
	g.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.turn:
		return leave
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted { // given a turn as the wait ended: it is held, use it
		return leave
	}
	q := g.waiting[namespace]
	for i, o := range q {
		if o == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(g.waiting, namespace)
	} else {
		g.waiting[namespace] = q
	}
	return nil
}

// take gives namespace a turn; g.mu is held.
func (g *gate) take(namespace string) {
	g.free--
	g.held[namespace]++
}

// leave gives namespace's turn back and hands every free turn to the
// waiters that may take one.
func (g *gate) leave(namespace string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free++
	if g.held[namespace]--; g.held[namespace] == 0 {
		delete(g.held, namespace)
	}
	for g.free > 0 {
		var next *waiter
		for ns, q := range g.waiting {
			if g.held[ns] >= g.perNamespace {
				continue
			}
			if next == nil || g.held[ns] < g.held[next.namespace] ||
				g.held[ns] == g.held[next.namespace] && q[0].arrival < next.arrival {
				next = q[0]
			}
		}
		if next == nil {
			return
		}
		if q := g.waiting[next.namespace][1:]; len(q) == 0 {
			delete(g.waiting, next.namespace)
		} else {
			g.waiting[next.namespace] = q
		}
		g.take(next.namespace)
		next.granted = true
		close(next.turn)
	}
}

// errBusy refuses a review that found no turn within ReviewQueueWait.
func errBusy(namespace string) error {
	return apierrors.NewTooManyRequests(codes.AdmissionBusy.Message(fmt.Sprintf(
		"this RetryPolicy review waited %s for a turn (at most %d reviews are judged at once, at most %d of namespace %s's); "+
			"it was refused, nothing was stored, and the same request may be sent again (admission fails closed)",
		ReviewQueueWait, MaxConcurrentReviews, MaxConcurrentReviewsPerNamespace, namespace)), 1)
}

// errOutOfTime refuses a review that could not be judged within ReviewBudget.
func errOutOfTime() error {
	return apierrors.NewTimeoutError(codes.AdmissionBusy.Message(fmt.Sprintf(
		"the review could not be judged within its %s budget; it was refused, nothing was stored, "+
			"and the same request may be sent again (admission fails closed)", ReviewBudget)), 1)
}
