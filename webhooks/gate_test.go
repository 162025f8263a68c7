package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
)

// staticValidator is the manager's validator over fixed policies: a bound
// on concurrent reviews, the rules reading lk.
func staticValidator(lk policygraph.Lookup) *RetryPolicyValidator {
	return &RetryPolicyValidator{Limits: policygraph.DefaultLimits(), lookup: lk, turns: newGate(MaxConcurrentReviews, MaxConcurrentReviewsPerNamespace)}
}

// A review that finds every turn it may take taken for ReviewQueueWait is
// refused with ERR_ADMISSION_BUSY, a 429 the API server passes on, never
// admitted: when its own namespace holds its share, and when other
// namespaces hold every turn. Once a turn is free the same review is
// judged, and gives its turn back.
func TestReviewWithoutATurnIsRefused(t *testing.T) {
	others := make([]string, MaxConcurrentReviews)
	for i := range others {
		others[i] = fmt.Sprintf("team-%d", i/MaxConcurrentReviewsPerNamespace)
	}
	for name, holders := range map[string][]string{
		"its namespace holds its share": slices.Repeat([]string{"team-a"}, MaxConcurrentReviewsPerNamespace),
		"others hold every turn":        others,
	} {
		t.Run(name, func(t *testing.T) {
			v := staticValidator(policygraph.NewStaticLookup())
			var leaves []func()
			for _, ns := range holders {
				if leave := v.turns.enter(context.Background(), ns, 0); leave != nil {
					leaves = append(leaves, leave)
				}
			}
			if len(leaves) != len(holders) {
				t.Fatalf("%d of %d holders got a turn", len(leaves), len(holders))
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
			leaves[len(leaves)-1]()
			if _, err := v.ValidateCreate(context.Background(), p); err != nil {
				t.Fatalf("with a free turn: %v", err)
			}
			if free, waiting := v.turns.state(); free != MaxConcurrentReviews-len(holders)+1 || waiting != 0 {
				t.Errorf("after the judged review: %d turns free, %d waiting; want %d, 0", free, waiting, MaxConcurrentReviews-len(holders)+1)
			}
		})
	}
}

// A turn given back goes to the waiting namespace that holds the fewest,
// the earliest waiter among equals, never to a namespace at its share:
// team-b, waiting first, is overtaken by team-c, which holds none.
func TestAReturnedTurnGoesToTheNamespaceHoldingFewest(t *testing.T) {
	g := newGate(4, 2)
	ctx := context.Background()
	var leaveA, leaveB []func()
	for range 2 {
		leaveA = append(leaveA, g.enter(ctx, "team-a", 0))
		leaveB = append(leaveB, g.enter(ctx, "team-b", 0))
	}
	if free, _ := g.state(); free != 0 {
		t.Fatalf("%d turns free after four holders", free)
	}
	got := make(chan string, 3)
	wait := func(ns string, waiting int) {
		go func() {
			if leave := g.enter(ctx, ns, time.Minute); leave != nil {
				got <- ns
			}
		}()
		for _, w := g.state(); w < waiting; _, w = g.state() {
			time.Sleep(time.Millisecond)
		}
	}
	wait("team-a", 1) // at its share: never served while it is
	wait("team-b", 2)
	wait("team-c", 3)
	leaveB[0]() // team-b holds 1, team-c none
	if ns := <-got; ns != "team-c" {
		t.Fatalf("the first turn went to %s, want team-c, which held none", ns)
	}
	leaveA[0]() // team-a 1, team-b 1, team-c 1: the earliest waiter of those below their share
	if ns := <-got; ns != "team-a" {
		t.Fatalf("the second turn went to %s, want team-a, the earliest waiter", ns)
	}
	leaveA[1]()
	if ns := <-got; ns != "team-b" {
		t.Fatalf("the third turn went to %s, want team-b", ns)
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

// However many callers of one namespace, no more than
// MaxConcurrentReviewsPerNamespace are judged at once, and every caller is
// answered: judged, or refused as busy.
func TestConcurrentReviewsAreBounded(t *testing.T) {
	lk := &countingLookup{StaticLookup: policygraph.NewStaticLookup(*fixtures.Policy("team-a", "job", "job", 1, fixtures.BudgetRef("b"))),
		delay: 20 * time.Millisecond}
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
	if most := lk.mostInProgress(); most > MaxConcurrentReviewsPerNamespace {
		t.Errorf("%d reviews of one namespace read the cache at once, above MaxConcurrentReviewsPerNamespace %d", most, MaxConcurrentReviewsPerNamespace)
	} else if most < 2 {
		t.Errorf("at most %d review at a time: the bound serialised them", most)
	}
}

// A namespace that floods the webhook with slow reviews does not refuse
// another's admission: over the real webhook server, while team-a's reviews
// each take longer than ReviewQueueWait, every one of team-b's instant
// reviews is admitted, team-a holding no more than its share. The finding:
// with one set of turns for the cluster, team-a held all of them and 4 of
// team-b's 10 reviews were refused ERR_ADMISSION_BUSY.
func TestAFloodingNamespaceLeavesOthersTheirTurns(t *testing.T) {
	lk := &countingLookup{StaticLookup: policygraph.NewStaticLookup(*fixtures.Policy("team-a", "job", "job", 1, fixtures.BudgetRef("b"))),
		only: "team-a", delay: ReviewQueueWait + ReviewQueueWait/2}
	ts := reviewServer(t, staticValidator(lk))
	slow := fixtures.Policy("team-a", "connector", "connector", 3, fixtures.Parent("job"), fixtures.BudgetRef("b"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for range 3 * MaxConcurrentReviews {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := postPolicy(ts, slow); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); lk.inProgress() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("team-a's flood never reached the validator")
		}
	}
	for i := range 10 {
		res, err := postPolicy(ts, fixtures.Policy("team-b", fmt.Sprintf("instant-%d", i), "api", 1, fixtures.BudgetRef("b")))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			t.Errorf("team-b's review %d was refused while team-a flooded: %s", i, res.Result.Message)
		}
	}
	if most := lk.mostInProgress(); most > MaxConcurrentReviewsPerNamespace {
		t.Errorf("team-a's reviews held %d turns at once, above its share of %d", most, MaxConcurrentReviewsPerNamespace)
	}
}

// reviewServer serves v at /validate as the manager does: through a real
// controller-runtime webhook server's mux, refusals counted, behind a real
// net/http server on loopback.
func reviewServer(t *testing.T, v *RetryPolicyValidator) *httptest.Server {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	base := webhook.NewServer(webhook.Options{})
	CountDenials(base).Register("/validate", admission.WithValidator[*v1.RetryPolicy](scheme, v))
	ts := httptest.NewServer(base.WebhookMux())
	t.Cleanup(ts.Close)
	return ts
}

// postPolicy sends the review of p's creation to ts and returns its answer.
func postPolicy(ts *httptest.Server, p *v1.RetryPolicy) (*admissionv1.AdmissionResponse, error) {
	p = p.DeepCopy()
	p.APIVersion, p.Kind = v1.GroupVersion.String(), "RetryPolicy"
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID(p.Namespace + "/" + p.Name), Operation: admissionv1.Create,
			Kind:      metav1.GroupVersionKind{Group: v1.GroupVersion.Group, Version: v1.GroupVersion.Version, Kind: "RetryPolicy"},
			Namespace: p.Namespace, Name: p.Name, Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		return nil, err
	}
	res, err := ts.Client().Post(ts.URL+"/validate", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	var got admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &got); err != nil || res.StatusCode != http.StatusOK || got.Response == nil || got.Response.Result == nil {
		return nil, fmt.Errorf("review of %s/%s: answer %d %s (%v)", p.Namespace, p.Name, res.StatusCode, out, err)
	}
	return got.Response, nil
}

// countingLookup records how many Gets of namespace only (of every
// namespace when empty) are in progress at once, each held for delay or
// until its review's context ends, long enough for the others to pile up.
type countingLookup struct {
	policygraph.StaticLookup
	only      string
	delay     time.Duration
	mu        sync.Mutex
	now, most int
}

func (c *countingLookup) Get(ctx context.Context, key types.NamespacedName) (*v1.RetryPolicy, error) {
	if c.only != "" && key.Namespace != c.only {
		return c.StaticLookup.Get(ctx, key)
	}
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	t := time.NewTimer(c.delay)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	return c.StaticLookup.Get(ctx, key)
}

func (c *countingLookup) inProgress() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *countingLookup) mostInProgress() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

// state is how many turns are free and how many reviews wait for one.
func (g *gate) state() (free, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.waiting {
		waiting += len(q)
	}
	return g.free, waiting
}
