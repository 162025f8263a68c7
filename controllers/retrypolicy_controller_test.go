package controllers_test

import (
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
)

var _ = Describe("Publishing", func() {
	It("publishes a policy on create, with owner, labels, hash, status and its budget inlined", func() {
		ns, p := publishedConnector("sms-2fa-dispatch", fixtures.Critical, fixtures.Deadline(4*time.Second))

		Eventually(func(g Gomega) {
			payload, cm := payloadOf(g, ns, p.Name)
			g.Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.PolicyLabel, p.Name))
			g.Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.ManagedByLabel, "retryguard"))
			g.Expect(cm.Annotations).To(HaveKey(policyconfig.ContentHashAnnotation))
			g.Expect(cm.OwnerReferences).To(ConsistOf(And(
				HaveField("Kind", "RetryPolicy"), HaveField("Name", p.Name), HaveField("UID", p.UID),
				HaveField("Controller", HaveValue(BeTrue())))))
			g.Expect(payload.Budget).To(HaveField("Name", fixtures.DefaultBudget))
			g.Expect(payload.Budget).To(HaveField("RetryPercent", BeEquivalentTo(10)))
			g.Expect(payload.Policy.Criticality).To(Equal("Critical"))

			_, stored := readyOf(g, ns, p.Name)
			g.Expect(stored.Status.LeafAttempts).To(BeEquivalentTo(3))
			g.Expect(stored.Status.ConfigMapName).To(Equal("retrypolicy-sms-2fa-dispatch"))
			g.Expect(stored.Status.WorstCaseDuration).To(HaveValue(Equal(v1.DurationOf(4 * time.Second))))

			var budget v1.RetryBudget
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: fixtures.DefaultBudget}, &budget)).To(Succeed())
			g.Expect(budget.Status.PolicyCount).To(BeEquivalentTo(1))
			g.Expect(budget.Status.Conditions).To(ContainElement(HaveField("Reason", v1.ReasonAccepted)))
		}).Should(Succeed())
	})

	It("publishes a short deadline that never mentions retryAfter, with a Retry-After cap the deadline holds", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		p := fixtures.Policy(ns, "short", "connector", 3, fixtures.Deadline(2*time.Second))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.RetryAfter).To(HaveValue(HaveField("MaxDelay", BeNil())), "the API server stored a fixed default")
		expectReason(ns, p.Name, v1.ReasonPublished)
		payload, _ := payloadOf(Default, ns, p.Name)
		Expect(payload.Policy.RetryAfterMaxDelay.D()).To(Equal(1500 * time.Millisecond))
	})

	It("republishes on update", func() {
		ns, p := publishedConnector("p")
		edit(p, func(p *v1.RetryPolicy) { p.Spec.MaxAttempts = 2 })
		Eventually(func(g Gomega) {
			payload, _ := payloadOf(g, ns, p.Name)
			g.Expect(payload.Policy.MaxAttempts).To(BeEquivalentTo(2))
			g.Expect(payload.Policy.Generation).To(BeEquivalentTo(2))
		}).Should(Succeed())
	})

	It("writes nothing when nothing changed", func() {
		ns, p := publishedConnector("steady")
		var cmVersion, policyVersion string
		Eventually(func(g Gomega) {
			_, cm := payloadOf(g, ns, p.Name)
			_, stored := readyOf(g, ns, p.Name)
			cmVersion, policyVersion = cm.ResourceVersion, stored.ResourceVersion
			// The manager's cache has caught up with both.
			var cached v1.RetryPolicy
			g.Expect(mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(p), &cached)).To(Succeed())
			g.Expect(cached.ResourceVersion).To(Equal(policyVersion))
		}).Should(Succeed())

		// A reconcile of an unchanged policy, run directly, must be a no-op.
		r := &controllers.RetryPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("test"), Limits: policygraph.DefaultLimits()}
		for range 3 {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: p.Name}})
			Expect(err).NotTo(HaveOccurred())
		}
		_, cm := payloadOf(Default, ns, p.Name)
		_, stored := readyOf(Default, ns, p.Name)
		Expect(cm.ResourceVersion).To(Equal(cmVersion), "the ConfigMap was rewritten")
		Expect(stored.ResourceVersion).To(Equal(policyVersion), "the status was rewritten")
	})

	It("repairs a ConfigMap edited by hand", func() {
		ns, p := publishedConnector("tampered")
		_, cm := payloadOf(Default, ns, p.Name)
		edit(cm, func(cm *corev1.ConfigMap) { cm.Data[policyconfig.DataKey] = `{"schemaVersion":"forged"}` })
		Eventually(func(g Gomega) {
			payload, _ := payloadOf(g, ns, p.Name) // parses again
			g.Expect(payload.Policy.Name).To(Equal(p.Name))
		}).Should(Succeed())
	})
})

var _ = Describe("Budgets", func() {
	It("fan a change out to every referencing policy", func() {
		ns := newNamespace()
		b := fixtures.Budget(ns, fixtures.DefaultBudget, 10)
		Expect(k8s.Create(ctx, b)).To(Succeed())
		names := []string{"a", "b", "c"}
		for _, n := range names {
			Expect(k8s.Create(ctx, fixtures.Policy(ns, n, "connector", 3))).To(Succeed())
		}
		for _, n := range names {
			expectReason(ns, n, v1.ReasonPublished)
		}
		edit(b, func(b *v1.RetryBudget) { b.Spec.RetryPercent = 5 })
		Eventually(func(g Gomega) {
			for _, n := range names {
				payload, _ := payloadOf(g, ns, n)
				g.Expect(payload.Budget.Generation).To(BeEquivalentTo(2), n)
				g.Expect(payload.Budget.RetryPercent).To(BeEquivalentTo(5), n)
			}
			var stored v1.RetryBudget
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), &stored)).To(Succeed())
			g.Expect(stored.Status.PolicyCount).To(BeEquivalentTo(3))
			g.Expect(stored.Status.ObservedGeneration).To(BeEquivalentTo(2))
		}).Should(Succeed())
	})

	It("turn a policy NoRetry while missing, with a Warning event, and back when they appear", func() {
		ns := newNamespace()
		p := fixtures.Policy(ns, "orphan", "connector", 3)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReason(ns, p.Name, v1.ReasonBudgetNotFound)
		Eventually(func(g Gomega) {
			var evs eventsv1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
			g.Expect(evs.Items).To(ContainElement(And(
				HaveField("Type", "Warning"), HaveField("Reason", v1.ReasonBudgetNotFound),
				HaveField("Regarding.Name", p.Name))))
		}).Should(Succeed())
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		expectReason(ns, p.Name, v1.ReasonPublished)
	})
})

var _ = Describe("Call trees", func() {
	It("keep a child NoRetry until its parent exists", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "connector", "connector", 3, fixtures.Parent("job")))).To(Succeed())
		expectReason(ns, "connector", v1.ReasonParentNotFound)
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "job", "job", 1))).To(Succeed())
		expectReason(ns, "connector", v1.ReasonPublished)
		expectReason(ns, "job", v1.ReasonPublished)
	})

	It("count a hidden layer in status and payload, and fail closed when it tips the product over", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		job := fixtures.Policy(ns, "job", "job", 1)
		Expect(k8s.Create(ctx, job)).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "connector", "connector", 1, fixtures.Parent("job"), fixtures.Hidden(3)))).To(Succeed())
		expectReason(ns, "connector", v1.ReasonPublished)
		Eventually(func(g Gomega) {
			_, c := readyOf(g, ns, "connector")
			g.Expect(c.Status.LeafAttempts).To(BeEquivalentTo(3))
			payload, _ := payloadOf(g, ns, "connector")
			g.Expect(payload.Policy.LeafAttempts).To(BeEquivalentTo(3))
			g.Expect(payload.Policy.MaxAttempts).To(BeEquivalentTo(1), "the runtime's own attempts stay maxAttempts")
		}).Should(Succeed())

		edit(job, func(p *v1.RetryPolicy) { p.Spec.MaxAttempts = 2 })
		expectReason(ns, "connector", v1.ReasonAmplificationExceeded)
		Eventually(func(g Gomega) {
			_, c := readyOf(g, ns, "connector")
			g.Expect(c.Status.LeafAttempts).To(BeEquivalentTo(6))
		}).Should(Succeed())
	})

	It("fail a racing pair closed: both end AmplificationExceeded", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		parent := fixtures.Policy(ns, "job", "job", 3)
		child := fixtures.Policy(ns, "connector", "connector", 3, fixtures.Parent("job"))
		var wg sync.WaitGroup
		for _, p := range []*v1.RetryPolicy{parent, child} {
			wg.Go(func() {
				defer GinkgoRecover()
				Expect(k8s.Create(ctx, p)).To(Succeed())
			})
		}
		wg.Wait()
		expectReason(ns, "job", v1.ReasonAmplificationExceeded)
		expectReason(ns, "connector", v1.ReasonAmplificationExceeded)
		Eventually(func(g Gomega) {
			_, c := readyOf(g, ns, "connector")
			g.Expect(c.Status.LeafAttempts).To(BeEquivalentTo(9))
		}).Should(Succeed())

		// Lowering the parent repairs both.
		edit(parent, func(p *v1.RetryPolicy) { p.Spec.MaxAttempts = 1 })
		expectReason(ns, "job", v1.ReasonPublished)
		expectReason(ns, "connector", v1.ReasonPublished)
	})

	It("fail a pool shared across criticalities closed, on both sides", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Budget(ns, "marketing", 5))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "sms-2fa", "connector", 3, fixtures.Pool("pool-sms-auth"), fixtures.Critical))).To(Succeed())
		mkt := fixtures.Policy(ns, "marketing", "connector", 2, fixtures.Pool("pool-sms-auth"), fixtures.BudgetRef("marketing"))
		Expect(k8s.Create(ctx, mkt)).To(Succeed())
		expectReason(ns, "sms-2fa", v1.ReasonSharedFailureDomain)
		expectReason(ns, "marketing", v1.ReasonSharedFailureDomain)
		Expect(k8s.Delete(ctx, mkt)).To(Succeed())
		expectReason(ns, "sms-2fa", v1.ReasonPublished)
	})
})

var _ = Describe("Metrics", func() {
	It("count policies by Ready reason", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "lonely", "connector", 2, fixtures.BudgetRef("nowhere")))).To(Succeed())
		expectReason(ns, "lonely", v1.ReasonBudgetNotFound)
		Eventually(func(g Gomega) float64 {
			return gaugeValue(g, "retryguard_retrypolicies", map[string]string{"ready": "False", "reason": v1.ReasonBudgetNotFound})
		}).Should(BeNumerically(">=", 1))
	})
})

func gaugeValue(g Gomega, name string, labels map[string]string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if got[k] != v {
			return false
		}
	}
	return true
}
