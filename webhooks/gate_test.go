package webhooks

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/runtime/codes"
)

// staticValidator is the manager's validator over fixed policies: a bound
// on concurrent reviews, the rules reading lk.
func staticValidator(lk policygraph.Lookup) *RetryPolicyValidator {
	return &RetryPolicyValidator{Limits: policygraph.DefaultLimits(), lookup: lk, turns: make(gate, MaxConcurrentReviews)}
}

// A review that finds every turn taken for ReviewQueueWait is refused with
// ERR_ADMISSION_BUSY, a 429 the API server passes on, never admitted; once
// a turn is free the same review is judged.
func TestReviewWithoutATurnIsRefused(t *testing.T) {
	v := staticValidator(policygraph.NewStaticLookup())
	for range MaxConcurrentReviews {
		v.turns <- struct{}{}
	}
	p := fixtures.Policy("team-a", "connector", "connector", 3, fixtures.BudgetRef("b"))
	start := time.Now()
	_, err := v.ValidateCreate(context.Background(), p)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), string(codes.AdmissionBusy)+": ") {
		t.Fatalf("a review without a turn: %v, want a 429 with %s", err, codes.AdmissionBusy)
	}
	if waited := time.Since(start); waited < ReviewQueueWait {
		t.Errorf("refused after %s, before its ReviewQueueWait of %s", waited, ReviewQueueWait)
	}
	<-v.turns
	if _, err := v.ValidateCreate(context.Background(), p); err != nil {
		t.Fatalf("with a free turn: %v", err)
	}
	if len(v.turns) != MaxConcurrentReviews-1 {
		t.Errorf("the judged review kept its turn: %d taken", len(v.turns))
	}
}

// A review whose caller has gone, or whose budget is spent, is refused with
// ERR_ADMISSION_BUSY as a timeout even though a turn is free and its chain
// would pass: a verdict cut short is no verdict (admission fails closed).
func TestReviewOutOfTimeIsRefused(t *testing.T) {
	lk := policygraph.NewStaticLookup(*fixtures.Policy("team-a", "job", "job", 1, fixtures.BudgetRef("b")))
	v := staticValidator(lk)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := v.ValidateCreate(ctx, fixtures.Policy("team-a", "connector", "connector", 3, fixtures.Parent("job"), fixtures.BudgetRef("b")))
	if !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), string(codes.AdmissionBusy)+": ") {
		t.Fatalf("a review past its time: %v, want a timeout with %s", err, codes.AdmissionBusy)
	}
}

// However many callers, no more than MaxConcurrentReviews are judged at
// once, and every caller is answered: judged, or refused as busy.
func TestConcurrentReviewsAreBounded(t *testing.T) {
	lk := &countingLookup{StaticLookup: policygraph.NewStaticLookup(*fixtures.Policy("team-a", "job", "job", 1, fixtures.BudgetRef("b")))}
	v := staticValidator(lk)
	var wg sync.WaitGroup
	for range 8 * MaxConcurrentReviews {
		wg.Go(func() {
			_, err := v.ValidateCreate(context.Background(),
				fixtures.Policy("team-a", "connector", "connector", 3, fixtures.Parent("job"), fixtures.BudgetRef("b")))
			if err != nil && !apierrors.IsTooManyRequests(err) {
				t.Errorf("a caller got %v", err)
			}
		})
	}
	wg.Wait()
	if lk.most > MaxConcurrentReviews {
		t.Errorf("%d reviews read the cache at once, above MaxConcurrentReviews %d", lk.most, MaxConcurrentReviews)
	}
	if lk.most < 2 {
		t.Errorf("at most %d review at a time: the bound serialised them", lk.most)
	}
}

// countingLookup records how many Gets are in progress at once, each held
// long enough for the others to pile up.
type countingLookup struct {
	policygraph.StaticLookup
	mu        sync.Mutex
	now, most int
}

func (c *countingLookup) Get(ctx context.Context, key types.NamespacedName) (*v1.RetryPolicy, error) {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	return c.StaticLookup.Get(ctx, key)
}
