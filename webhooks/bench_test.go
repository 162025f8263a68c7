package webhooks_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/hack/devenv"
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
	env, err := devenv.NewEnvironment()
	if err != nil {
		b.Fatal(err)
	}
	if withWebhooks {
		devenv.EnableWebhooks(env)
	}
	cfg, err := env.Start()
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	ctx, cancel := context.WithCancel(context.Background())
	mgr, _, err := devenv.StartManaged(ctx, env, cfg, policygraph.DefaultLimits(), devenv.Features{Webhooks: withWebhooks})
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	bc := &benchCluster{env: env, mgr: mgr, client: c, stop: cancel}
	b.Cleanup(func() {
		cancel()
		_ = env.Stop()
	})
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
		work <- chainPolicy(prefix, i, depth)
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if err := devenv.Settle(ctx, bc.mgr); err != nil {
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
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				p := fixtures.Policy("bench", fmt.Sprintf("new-%d", i), "leaf", 1,
					fixtures.Parent(fmt.Sprintf("d3-%d-2", i%333)), fixtures.Pool(fmt.Sprintf("d3-pool-%d", i%333)))
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
		})
	}
}
