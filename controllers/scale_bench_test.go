package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// BenchmarkScale measures the controllers at 1,000 policies over 10 budgets
// on a real API server. Run it once:
//
//	go test -run '^$' -bench BenchmarkScale -benchtime 1x ./controllers/
//
// publish-s: from the first create until all 1,000 ConfigMaps exist.
// fanout-s: from one budget update until its 100 policies' payloads carry
// the new generation. reconciles/*: RetryPolicy reconciles per change,
// counted until the controller is quiet again.
func BenchmarkScale(b *testing.B) {
	const policies, budgets = 1000, 10
	bctx, m, c, _ := startControllers(b)
	ns := "scale"
	if err := c.Create(bctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	for i := range budgets {
		if err := c.Create(bctx, fixtures.Budget(ns, fmt.Sprintf("budget-%d", i), 10)); err != nil {
			b.Fatal(err)
		}
	}

	for b.Loop() {
		before := reconciles(b)
		start := time.Now()
		createAll(b, c, ns, policies, budgets)
		created := time.Since(start)
		waitFor(b, 60*time.Second, func() bool { return publishedCount(b, m, ns, "", 0) == policies })
		publish := time.Since(start)
		afterPublish := quiesce(b)

		var budget v1.RetryBudget
		if err := c.Get(bctx, client.ObjectKey{Namespace: ns, Name: "budget-0"}, &budget); err != nil {
			b.Fatal(err)
		}
		budget.Spec.RetryPercent = 5
		start = time.Now()
		if err := c.Update(bctx, &budget); err != nil {
			b.Fatal(err)
		}
		waitFor(b, 30*time.Second, func() bool {
			return publishedCount(b, m, ns, "budget-0", budget.Generation) == policies/budgets
		})
		fanout := time.Since(start)
		afterFanout := quiesce(b)
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric(publish.Seconds(), "publish-s")
		b.ReportMetric(fanout.Seconds(), "fanout-s")
		b.ReportMetric((afterPublish-before)/policies, "reconciles/created-policy")
		b.ReportMetric((afterFanout-afterPublish)/(policies/budgets), "reconciles/fanned-out-policy")
	}
}

func createAll(b *testing.B, c client.Client, ns string, n, budgets int) {
	work := make(chan *v1.RetryPolicy)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for p := range work {
				if err := c.Create(context.Background(), p); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- fixtures.Policy(ns, fmt.Sprintf("p-%04d", i), "connector", 3, fixtures.BudgetRef(fmt.Sprintf("budget-%d", i%budgets)))
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// publishedCount counts published ConfigMaps in the manager's cache; with a
// budget named, only those whose payload carries that budget at generation.
func publishedCount(b *testing.B, m ctrl.Manager, ns, budget string, generation int64) int {
	var cms corev1.ConfigMapList
	if err := m.GetCache().List(context.Background(), &cms, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, cm := range cms.Items {
		if _, policy := cm.Labels[policyconfig.PolicyLabel]; !policy {
			continue // a budget's count (retrybudget-<name>)
		}
		if budget == "" {
			n++
			continue
		}
		p, err := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
		if err == nil && p.Budget != nil && p.Budget.Name == budget && p.Budget.Generation == generation {
			n++
		}
	}
	return n
}

func waitFor(b *testing.B, limit time.Duration, done func() bool) {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			b.Fatalf("not done after %s", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quiesce waits until the reconcile counter has not moved for a second, so
// that one phase's follow-up reconciles are not counted in the next.
func quiesce(b *testing.B) float64 {
	last := reconciles(b)
	for still := 0; still < 10; {
		time.Sleep(100 * time.Millisecond)
		if now := reconciles(b); now == last {
			still++
		} else {
			last, still = now, 0
		}
	}
	return last
}

// reconciles sums controller-runtime's reconcile counter for the
// RetryPolicy controller.
func reconciles(b *testing.B) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "retrypolicy" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
