package webhooks_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/webhooks"
)

// benchCluster is an envtest control plane with a running manager whose
// cache holds the policies the benchmark created.
type benchCluster struct {
	env    *envtest.Environment
	mgr    ctrl.Manager
	client client.Client
	stop   context.CancelFunc
}

func startBenchCluster(b *testing.B, withWebhooks bool) *benchCluster {
	b.Helper()
	ctrl.SetLogger(logr.Discard())
	env, cfg := testenv.StartEnvironment(b, withWebhooks)
	cfg.QPS, cfg.Burst = 5000, 5000
	ctx, cancel := context.WithCancel(context.Background())
	mgr, _, err := testenv.StartManaged(ctx, env, cfg, policygraph.DefaultLimits(), testenv.Features{Webhooks: withWebhooks})
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	bc := &benchCluster{env: env, mgr: mgr, client: c, stop: cancel}
	b.Cleanup(cancel) // before the control plane stops
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	return bc
}

// populate grows namespace bench to n policies in chains of depth layers
// (maxAttempts 1 each), one pool per chain, all on one budget, and waits for
// the manager's cache to hold them.
func (bc *benchCluster) populate(b *testing.B, from, n, depth int) {
	prefix := fmt.Sprintf("d%d", depth)
	bc.create(b, from, n, func(i int) *v1.RetryPolicy { return chainPolicy(prefix, i, depth) })
}

// create creates policies build(from) to build(n-1), 8 at a time, and
// waits for the manager's cache to hold them.
func (bc *benchCluster) create(b *testing.B, from, n int, build func(int) *v1.RetryPolicy) {
	b.Helper()
	ctx := context.Background()
	work := make(chan *v1.RetryPolicy)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 8 {
		wg.Go(func() {
			for p := range work {
				if err := bc.client.Create(ctx, p); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := from; i < n; i++ {
		work <- build(i)
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	// Settle waits 10 s; 10,000 creates on a loaded machine may need more.
	err := testenv.Settle(ctx, bc.mgr)
	for try := 0; err != nil && try < 5; try++ {
		err = testenv.Settle(ctx, bc.mgr)
	}
	if err != nil {
		b.Fatal(err)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// chainPolicy is policy i of a layout of the given depth: chain i/depth,
// layer i%depth, named <prefix>-<chain>-<layer>.
func chainPolicy(prefix string, i, depth int) *v1.RetryPolicy {
	chain, layer := i/depth, i%depth
	opts := []fixtures.Option{fixtures.Pool(fmt.Sprintf("%s-pool-%d", prefix, chain))}
	if layer > 0 {
		opts = append(opts, fixtures.Parent(fmt.Sprintf("%s-%d-%d", prefix, chain, layer-1)))
	}
	return fixtures.Policy("bench", fmt.Sprintf("%s-%d-%d", prefix, chain, layer), fmt.Sprintf("layer-%d", layer), 1, opts...)
}

// BenchmarkValidateRetryPolicy measures one admission decision against the
// manager's real informer cache: a new leaf under the deepest policy of a
// chain, on that chain's pool. The cost follows the chain's depth and the
// pool's users, not the number of policies in the cache.
func BenchmarkValidateRetryPolicy(b *testing.B) {
	bc := startBenchCluster(b, false)
	v := &webhooks.RetryPolicyValidator{Reader: bc.mgr.GetCache(), Limits: policygraph.DefaultLimits()}
	ctx := context.Background()
	have := map[int]int{} // depth → policies created in that layout so far
	for _, tc := range []struct{ n, depth int }{
		{100, 3}, {1000, 3}, {3000, 3}, {1000, 1}, {1000, 10},
	} {
		// Each depth has its own layout (its own names); a second case of the
		// same depth grows it.
		bc.populate(b, have[tc.depth], tc.n, tc.depth)
		have[tc.depth] = tc.n
		leaf := fixtures.Policy("bench", "new-leaf", "leaf", 1,
			fixtures.Parent(fmt.Sprintf("d%d-0-%d", tc.depth, tc.depth-1)), fixtures.Pool(fmt.Sprintf("d%d-pool-0", tc.depth)))
		b.Run(fmt.Sprintf("policies=%d/depth=%d", bc.total(b), tc.depth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.ValidateCreate(ctx, leaf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func (bc *benchCluster) total(b *testing.B) int {
	var list v1.RetryPolicyList
	if err := bc.mgr.GetCache().List(context.Background(), &list); err != nil {
		b.Fatal(err)
	}
	return len(list.Items)
}

// BenchmarkAdmissionLatency creates policies one at a time through the real
// API server with 1,000 policies present, with and without the webhook
// in the path, and reports p50 and p99 of the create round trip. Run it with
// -benchtime=500x for the figure in docs/benchmarks.md.
func BenchmarkAdmissionLatency(b *testing.B) {
	for _, withWebhooks := range []bool{true, false} {
		b.Run(fmt.Sprintf("webhook=%v", withWebhooks), func(b *testing.B) {
			bc := startBenchCluster(b, withWebhooks)
			bc.populate(b, 0, 1000, 3)
			bc.latency(b, func(i int) *v1.RetryPolicy {
				return fixtures.Policy("bench", fmt.Sprintf("new-%d", i), "leaf", 1,
					fixtures.Parent(fmt.Sprintf("d3-%d-2", i%333)), fixtures.Pool(fmt.Sprintf("d3-pool-%d", i%333)))
			})
		})
	}
}

// latency creates build(0), build(1), ... one at a time through the API
// server and reports p50 and p99 of the create round trip.
func (bc *benchCluster) latency(b *testing.B, build func(int) *v1.RetryPolicy) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		p := build(i)
		i++
		start := time.Now()
		if err := bc.client.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// The cross-namespace layout: benchNamespaces namespaces, each labelled
// benchFleetLabel, and chains of crossDepth layers whose layer k of chain c
// lives in namespace (c+k) mod benchNamespaces, so that every chain crosses
// crossDepth namespaces. Every parent consents by Selector, so that each
// admission also reads the child namespace's labels.
const (
	benchNamespaces = 50
	crossDepth      = 3
	crossPolicies   = 1000
	crossChains     = crossPolicies / crossDepth
)

var benchFleetLabel = map[string]string{"retryguard.io/fleet": "bench"}

func benchNamespace(i int) string { return fmt.Sprintf("bench-%d", i%benchNamespaces) }

// crossPolicy is policy i of the cross-namespace layout, named x-<chain>-<layer>.
func crossPolicy(i int) *v1.RetryPolicy {
	chain, layer := i/crossDepth, i%crossDepth
	opts := []fixtures.Option{fixtures.Pool(fmt.Sprintf("x-pool-%d", chain)),
		fixtures.Allowing(v1.NamespacesFromSelector, benchFleetLabel)}
	if layer > 0 {
		opts = append(opts, fixtures.ParentIn(benchNamespace(chain+layer-1), fmt.Sprintf("x-%d-%d", chain, layer-1)))
	}
	return fixtures.Policy(benchNamespace(chain+layer), fmt.Sprintf("x-%d-%d", chain, layer), fmt.Sprintf("layer-%d", layer), 1, opts...)
}

// crossLeaf is the i-th new leaf, under the deepest layer of a chain and in
// the namespace after that layer's: one more namespace crossed.
func crossLeaf(i int) *v1.RetryPolicy {
	chain := i % crossChains
	return fixtures.Policy(benchNamespace(chain+crossDepth), fmt.Sprintf("new-%d", i), "leaf", 1,
		fixtures.ParentIn(benchNamespace(chain+crossDepth-1), fmt.Sprintf("x-%d-%d", chain, crossDepth-1)),
		fixtures.Pool(fmt.Sprintf("x-pool-%d", chain)))
}

// crossNamespaces creates the labelled namespaces of the cross-namespace
// layout and its first crossPolicies policies.
func (bc *benchCluster) crossNamespaces(b *testing.B) {
	b.Helper()
	for i := range benchNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace(i), Labels: benchFleetLabel}}
		if err := bc.client.Create(context.Background(), ns); err != nil {
			b.Fatal(err)
		}
	}
	bc.create(b, 0, crossPolicies, crossPolicy)
	// The manager's controllers watch namespace metadata from the start; a
	// manager with the webhooks alone starts that informer on the first
	// consent check. Start it here, so that no timed create waits for it.
	if _, _, err := (policyindex.CacheLookup{Reader: bc.mgr.GetCache()}).NamespaceLabels(context.Background(), benchNamespace(0)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkValidateRetryPolicyAcrossNamespaces is BenchmarkValidateRetryPolicy
// for chains that cross namespaces: a new leaf in a fourth namespace under
// a chain of three, with 1,000 and then 3,000 policies over 50 namespaces
// in the cache.
func BenchmarkValidateRetryPolicyAcrossNamespaces(b *testing.B) {
	bc := startBenchCluster(b, false)
	bc.crossNamespaces(b)
	v := &webhooks.RetryPolicyValidator{Reader: bc.mgr.GetCache(), Limits: policygraph.DefaultLimits()}
	leaf := crossLeaf(0)
	for _, n := range []int{crossPolicies, 3 * crossPolicies} {
		bc.create(b, crossPolicies, n, crossPolicy)
		b.Run(fmt.Sprintf("policies=%d/namespaces=%d/depth=%d", bc.total(b), benchNamespaces, crossDepth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.ValidateCreate(context.Background(), leaf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAdmissionLatencyAcrossNamespaces is BenchmarkAdmissionLatency
// with 1,000 policies spread over 50 namespaces in chains that cross three
// namespaces, each parent consenting by namespace Selector; each create is
// a leaf in yet another namespace. Run it with -benchtime=500x.
func BenchmarkAdmissionLatencyAcrossNamespaces(b *testing.B) {
	for _, withWebhooks := range []bool{true, false} {
		b.Run(fmt.Sprintf("webhook=%v", withWebhooks), func(b *testing.B) {
			bc := startBenchCluster(b, withWebhooks)
			bc.crossNamespaces(b)
			bc.latency(b, crossLeaf)
		})
	}
}

// floodChildren is how many children the flooded root has, as in the
// finding that a flood of reviews of such a root pushed a legitimate update
// towards the 5 s timeout.
const floodChildren = 10_000

// BenchmarkAdmissionUnderFlood times a legitimate review of a root with
// 10,000 children while flooders callers send the same review in a loop,
// with no flood as the peer in the same run, through the manager's
// validator (children read in place, at most webhooks.MaxConcurrentReviews
// at once) and through the old path (a validator built from its fields: a
// list per descendant, no bound) for comparison. It reports p50 and p99 of
// the legitimate review and how many of them were refused. Then, through
// the manager's validator, it times a review of another namespace while
// the flooders send reviews of a root in their own namespace whose walk no
// memo keeps (flood=uncached): each holds its turn for the whole walk of
// 10,000 children, and the other namespace's reviews must all be admitted.
// Run it with -benchtime=20x.
func BenchmarkAdmissionUnderFlood(b *testing.B) {
	bc := startBenchCluster(b, false)
	ctx := context.Background()
	root := fixtures.Policy("bench", "root", "root", 1)
	if err := bc.client.Create(ctx, root); err != nil {
		b.Fatal(err)
	}
	bc.create(b, 0, floodChildren, func(i int) *v1.RetryPolicy {
		return fixtures.Policy("bench", fmt.Sprintf("child-%d", i), "child", 1, fixtures.Parent("root"))
	})
	indexed, err := webhooks.NewRetryPolicyValidator(ctx, bc.mgr.GetCache(), policygraph.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	listed := &webhooks.RetryPolicyValidator{Reader: bc.mgr.GetCache(), Limits: policygraph.DefaultLimits()}
	for _, path := range []struct {
		name string
		v    *webhooks.RetryPolicyValidator
	}{{"indexed", indexed}, {"listed", listed}} {
		for _, flooders := range []int{0, 96} {
			b.Run(fmt.Sprintf("path=%s/children=%d/flooders=%d", path.name, floodChildren, flooders), func(b *testing.B) {
				flood(b, path.v, root, root, flooders)
			})
		}
	}
	var wide *v1.RetryPolicy // created by the first sub-benchmark that needs it
	other := fixtures.Policy(otherNamespace, "api", "api", 1)
	for _, flooders := range []int{0, 96} {
		b.Run(fmt.Sprintf("path=indexed/flood=uncached/children=%d/flooders=%d/reviewed=%s", floodChildren, flooders, otherNamespace),
			func(b *testing.B) {
				if wide == nil {
					wide = bc.uncachedRoot(b)
				}
				flood(b, indexed, wide, other, flooders)
			})
	}
}

// The namespaces of the flood from one namespace: the flooders' root in
// floodNamespace, its children in floodChildNamespace, which the root
// consents to by Selector, and the timed review in otherNamespace.
const (
	floodNamespace      = "bench-flood"
	floodChildNamespace = "bench-flood-children"
	otherNamespace      = "bench-other"
)

// uncachedRoot creates a root in floodNamespace with floodChildren children
// in floodChildNamespace. Its consent is decided by that namespace's labels,
// so that no memo keeps its walk: every review of it walks every child.
func (bc *benchCluster) uncachedRoot(b *testing.B) *v1.RetryPolicy {
	b.Helper()
	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{floodNamespace: nil, floodChildNamespace: benchFleetLabel, otherNamespace: nil} {
		if err := bc.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil {
			b.Fatal(err)
		}
	}
	root := fixtures.Policy(floodNamespace, "wide", "root", 1, fixtures.Allowing(v1.NamespacesFromSelector, benchFleetLabel))
	if err := bc.client.Create(ctx, root); err != nil {
		b.Fatal(err)
	}
	bc.create(b, 0, floodChildren, func(i int) *v1.RetryPolicy {
		return fixtures.Policy(floodChildNamespace, fmt.Sprintf("child-%d", i), "child", 1, fixtures.ParentIn(floodNamespace, "wide"))
	})
	// As crossNamespaces: the namespace metadata informer starts before timing.
	if _, _, err := (policyindex.CacheLookup{Reader: bc.mgr.GetCache()}).NamespaceLabels(ctx, floodChildNamespace); err != nil {
		b.Fatal(err)
	}
	return root
}

// floodPace is the pause between two timed reviews of another namespace
// under a flood.
const floodPace = 50 * time.Millisecond

// flood times v's review of reviewed while flooders goroutines send the
// review of flooded in a loop.
func flood(b *testing.B, v *webhooks.RetryPolicyValidator, flooded, reviewed *v1.RetryPolicy, flooders int) {
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var floodReviews, floodRefused atomic.Int64 // the flood's own: it is one, and beyond its share it waits or is refused
	for range flooders {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				floodReviews.Add(1)
				if _, err := v.ValidateUpdate(ctx, flooded, flooded); err != nil {
					floodRefused.Add(1)
				}
			}
		})
	}
	// A review of another namespace is far quicker than the flood's: it is
	// timed once every flooder has sent one, and paced, so that the timed
	// reviews sample the flood through many of its own.
	pace := time.Duration(0)
	if reviewed != flooded && flooders > 0 {
		pace = floodPace
		for floodReviews.Load() < int64(flooders) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(webhooks.ReviewQueueWait)
	}
	lat := make([]time.Duration, 0, b.N)
	refused := 0 // out of turns or of webhooks.ReviewBudget: refused, failing closed
	for b.Loop() {
		start := time.Now()
		if _, err := v.ValidateUpdate(ctx, reviewed, reviewed); err != nil {
			refused++
		}
		lat = append(lat, time.Since(start))
		if pace > 0 {
			b.StopTimer()
			time.Sleep(pace)
			b.StartTimer()
		}
	}
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(refused), "refused")
	if flooders > 0 {
		b.ReportMetric(float64(floodReviews.Load()), "flood-reviews")
		b.ReportMetric(float64(floodRefused.Load()), "flood-refused")
	}
}
