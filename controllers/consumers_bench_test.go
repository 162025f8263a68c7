package controllers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/testenv"
)

// BenchmarkBudgetsOfPod measures mapping one pod event to the fleet budgets
// that count it, through the informer cache the manager uses, with 5
// budgets in the pod's namespace and 0 or 2,000 budgets in 40 other
// namespaces. The cost follows the pod's namespace: compare the two in the
// same run.
//
//	go test -run '^$' -bench BenchmarkBudgetsOfPod -benchmem ./controllers/
func BenchmarkBudgetsOfPod(b *testing.B) {
	ctrl.SetLogger(logr.Discard())
	env, cfg := testenv.StartEnvironment(b, false)
	cfg.QPS, cfg.Burst = -1, 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	opts := controllers.CacheOptions()
	opts.Scheme = env.Scheme
	informers, err := cache.New(cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if _, err := informers.GetInformer(ctx, &v1.RetryBudget{}); err != nil {
		b.Fatal(err)
	}

	createNS := func(name string) {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			b.Fatal(err)
		}
	}
	createBudgets := func(ns string, n int) {
		for i := range n {
			if err := c.Create(ctx, fleetBudget(ns, fmt.Sprintf("b-%d", i), fmt.Sprintf("app-%d", i), 10)); err != nil {
				b.Fatal(err)
			}
		}
	}
	waitForBudgets := func(n int) {
		for {
			var list v1.RetryBudgetList
			if err := informers.List(ctx, &list); err != nil {
				b.Fatal(err)
			}
			if len(list.Items) == n {
				return
			}
		}
	}
	createNS("shop")
	createBudgets("shop", 5)
	waitForBudgets(5)
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p", Labels: map[string]string{"app": "app-3"}}}
	run := func(b *testing.B) {
		for b.Loop() {
			if got := controllers.BudgetsSelecting(ctx, informers, pod); len(got) != 1 {
				b.Fatalf("%d budgets select the pod, want 1", len(got))
			}
		}
	}
	b.Run("others=0", run)
	for i := range 40 {
		createNS(fmt.Sprintf("other-%d", i))
		createBudgets(fmt.Sprintf("other-%d", i), 50)
	}
	waitForBudgets(5 + 2000)
	b.Run("others=2000", run)
}
