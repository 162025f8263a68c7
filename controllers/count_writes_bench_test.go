package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// BenchmarkCountChangeWrites measures what one change of a fleet budget's
// consumers costs: 50 policies on one budget, 200 pods rolling (a pod
// created, then an old one deleted, every 250 ms: 80 count changes). It
// counts the ConfigMap writes the controller makes, as one watcher of the
// namespace's published ConfigMaps sees them, which is what every pod's
// informers receive: payload writes (retrypolicy-*) and count writes
// (retrybudget-*) apart, and the writes of the members' shards
// (retrymembers-*), which only the pods of each shard receive. Run it once:
//
//	go test -run '^$' -bench BenchmarkCountChangeWrites -benchtime 1x ./controllers/
//
// writes/change: ConfigMap writes per count change; each is also a watch
// event delivered to every pod of the namespace (pod-events/change).
func BenchmarkCountChangeWrites(b *testing.B) {
	const policies, pods, changes = 50, 200, 80
	bctx, m, c, cfg := startControllers(b)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const ns = "fleet"
	if err := c.Create(bctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	if err := c.Create(bctx, fleetBudget(ns, "vendor", "sender", 200)); err != nil {
		b.Fatal(err)
	}
	for i := range pods {
		if err := c.Create(bctx, newPod(ns, fmt.Sprintf("sender-%03d", i), "sender")); err != nil {
			b.Fatal(err)
		}
	}
	for i := range policies {
		name := fmt.Sprintf("p-%02d", i)
		if err := c.Create(bctx, fixtures.Policy(ns, name, "connector", 3, fixtures.BudgetRef("vendor"), fixtures.Service(name))); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, 60*time.Second, func() bool { return publishedCount(b, m, ns, "", 0) == policies })
	time.Sleep(2 * time.Second) // the first counts settle

	for b.Loop() {
		list, err := cs.CoreV1().ConfigMaps(ns).List(bctx, metav1.ListOptions{LabelSelector: policyconfig.ManagedByLabel + "=" + policyconfig.ManagedByValue})
		if err != nil {
			b.Fatal(err)
		}
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(bctx, metav1.ListOptions{LabelSelector: policyconfig.ManagedByLabel + "=" + policyconfig.ManagedByValue,
			ResourceVersion: list.ResourceVersion})
		if err != nil {
			b.Fatal(err)
		}
		var payloads, counts, shards atomic.Int64
		go func() {
			for e := range w.ResultChan() {
				cm, ok := e.Object.(*corev1.ConfigMap)
				if !ok || (e.Type != watch.Modified && e.Type != watch.Added) {
					continue
				}
				switch {
				case strings.HasPrefix(cm.Name, policyconfig.BudgetConfigMapPrefix):
					counts.Add(1)
				case strings.HasPrefix(cm.Name, policyconfig.MembersConfigMapPrefix):
					shards.Add(1) // delivered to the pods of that shard only
				default:
					payloads.Add(1)
				}
			}
		}()
		start := time.Now()
		for i := range changes / 2 {
			if err := c.Create(bctx, newPod(ns, fmt.Sprintf("sender-new-%03d", i), "sender")); err != nil {
				b.Fatal(err)
			}
			time.Sleep(250 * time.Millisecond)
			if err := c.Delete(bctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("sender-%03d", i)}}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		quiesce(b)
		time.Sleep(2 * time.Second) // the budget's last count (quiesce follows the policies' reconciles)
		elapsed := time.Since(start)
		w.Stop()
		// Lease renewals fall due during the roll too (one per budget, or
		// per policy when payloads carried the count): reported apart.
		writes := payloads.Load() + counts.Load()
		b.ReportMetric(float64(writes), "writes")
		b.ReportMetric(float64(writes)/changes, "writes/change")
		b.ReportMetric(float64(payloads.Load())/changes, "payload-writes/change")
		b.ReportMetric(float64(counts.Load())/changes, "count-writes/change")
		b.ReportMetric(float64(shards.Load())/changes, "shard-writes/change")
		b.ReportMetric(elapsed.Seconds()/policyconfig.ConsumerCountRefresh.Seconds(), "lease-renewals-per-budget-at-most")
		b.ReportMetric(float64(writes)*pods/changes, "pod-events/change")
	}
}

// startControllers starts a test API server and the controllers as cmd/manager
// runs them (no client throttle: server-side fairness), and returns a
// context that ends with the benchmark, the manager, a client and the
// server's config.
func startControllers(b *testing.B) (context.Context, ctrl.Manager, client.Client, *rest.Config) {
	ctrl.SetLogger(logr.Discard())
	env, cfg := testenv.StartEnvironment(b, false)
	cfg.QPS, cfg.Burst = -1, 0
	bctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	m, _, err := testenv.StartManaged(bctx, env, cfg, policygraph.DefaultLimits(), testenv.Features{Controllers: true})
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	return bctx, m, c, cfg
}
