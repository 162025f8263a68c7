package controllers_test

import (
	"fmt"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// With 32 RetryPolicy reconciles at once
// (the new default, which this suite's manager uses), 96 related policies
// created at once in one namespace (one parent with 95 children sharing a
// budget) all end Published, and the Ready gauge counts each policy once.
// Run with -race.
var _ = Describe("32 concurrent reconciles", func() {
	It("publishes 96 related policies created at once and counts each once", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "job", "job", 1))).To(Succeed())
		var wg sync.WaitGroup
		for i := range 95 {
			wg.Go(func() {
				defer GinkgoRecover()
				Expect(k8s.Create(ctx, fixtures.Policy(ns, fmt.Sprintf("c-%d", i), "connector", 3, fixtures.Parent("job")))).To(Succeed())
			})
		}
		wg.Wait()
		Eventually(func(g Gomega) {
			var list v1.RetryPolicyList
			g.Expect(k8s.List(ctx, &list)).To(Succeed())
			mine := 0
			for _, p := range list.Items {
				if p.Namespace != ns {
					continue
				}
				mine++
				c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady)
				g.Expect(c).NotTo(BeNil(), p.Name)
				g.Expect(c.Reason).To(Equal(v1.ReasonPublished), p.Name)
				g.Expect(c.ObservedGeneration).To(Equal(p.Generation), p.Name)
			}
			g.Expect(mine).To(Equal(96))
			mfs, err := metrics.Registry.Gather()
			g.Expect(err).NotTo(HaveOccurred())
			sum := 0.0
			for _, mf := range mfs {
				if mf.GetName() == "retryguard_retrypolicies" {
					for _, m := range mf.GetMetric() {
						sum += m.GetGauge().GetValue()
					}
				}
			}
			g.Expect(sum).To(BeNumerically("==", len(list.Items)), "the gauge counts every policy once")
		}, "60s").Should(Succeed())
	})
})
