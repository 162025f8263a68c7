package controllers_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// labelledNamespace creates a namespace with labels and the default budget.
func labelledNamespace(labels map[string]string) *corev1.Namespace {
	GinkgoHelper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ctl-%d", nsSeq.Add(1)), Labels: labels}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	Expect(k8s.Create(ctx, fixtures.Budget(n.Name, fixtures.DefaultBudget, 10))).To(Succeed())
	return n
}

var _ = Describe("Call chains across namespaces", func() {
	It("multiply a 3×3×3 chain over three namespaces and fail it closed, naming the namespaces", func() {
		gw, co, pay := labelledNamespace(nil).Name, labelledNamespace(nil).Name, labelledNamespace(nil).Name
		Expect(k8s.Create(ctx, fixtures.Policy(gw, "workflow", "workflow", 3, allowing(v1.NamespacesFromAll, nil)))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(co, "job", "job", 3, parentIn(gw, "workflow"), allowing(v1.NamespacesFromAll, nil)))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(pay, "connector", "connector", 3, parentIn(co, "job")))).To(Succeed())
		expectReason(pay, "connector", v1.ReasonAmplificationExceeded)
		expectReason(gw, "workflow", v1.ReasonAmplificationExceeded)
		Eventually(func(g Gomega) {
			c, p := readyOf(g, pay, "connector")
			g.Expect(p.Status.LeafAttempts).To(BeEquivalentTo(27))
			g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("%s/workflow(3) × %s/job(3) × %s/connector(3) = 27", gw, co, pay)))
		}).Should(Succeed())
	})

	It("do not count a child its parent does not allow: the child is ParentNotPermitted, the parent stays Published", func() {
		gw, pay := labelledNamespace(nil).Name, labelledNamespace(nil).Name
		Expect(k8s.Create(ctx, fixtures.Policy(gw, "job", "job", 3))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(pay, "connector", "connector", 3, parentIn(gw, "job")))).To(Succeed())
		expectReason(pay, "connector", v1.ReasonParentNotPermitted)
		expectReason(gw, "job", v1.ReasonPublished)
		Eventually(func(g Gomega) {
			c, _ := readyOf(g, pay, "connector")
			g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf(`RetryPolicy "%s/job" does not allow child layers from namespace %q`, gw, pay)))
		}).Should(Succeed())
	})

	It("turn a child ParentNotPermitted and NoRetry when its parent withdraws consent, and back when it consents again", func() {
		gw, pay := labelledNamespace(nil).Name, labelledNamespace(nil).Name
		job := fixtures.Policy(gw, "job", "job", 1, allowing(v1.NamespacesFromAll, nil))
		Expect(k8s.Create(ctx, job)).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(pay, "connector", "connector", 3, parentIn(gw, "job")))).To(Succeed())
		expectReason(pay, "connector", v1.ReasonPublished)

		edit(job, func(p *v1.RetryPolicy) { allowing(v1.NamespacesFromSame, nil)(p) })
		expectReason(pay, "connector", v1.ReasonParentNotPermitted)
		Eventually(func(g Gomega) {
			payload, _ := payloadOf(g, pay, "connector")
			g.Expect(payload.Enforcement.Mode).To(Equal(policyconfig.NoRetry))
		}).Should(Succeed())

		edit(job, func(p *v1.RetryPolicy) { allowing(v1.NamespacesFromAll, nil)(p) })
		expectReason(pay, "connector", v1.ReasonPublished)
	})

	It("keep counting the parent's attempts below a child it no longer allows: a grandchild above the limit turns not Ready", func() {
		// workflow(1) allows job(1) from payments; connector(3) below job:
		// 1 × 1 × 3 = 3. The gateway withdraws consent, so job no longer
		// bounds it, and raises workflow to 3: job is published NoRetry,
		// yet workflow still calls it 3 times, and each job call still
		// reaches connector's 3 attempts: 3 × 1 × 3 = 9.
		gw, pay := labelledNamespace(nil).Name, labelledNamespace(nil).Name
		workflow := fixtures.Policy(gw, "workflow", "workflow", 1, allowing(v1.NamespacesFromAll, nil))
		Expect(k8s.Create(ctx, workflow)).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(pay, "job", "job", 1, parentIn(gw, "workflow")))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(pay, "connector", "connector", 3, fixtures.Parent("job")))).To(Succeed())
		expectReason(pay, "connector", v1.ReasonPublished)

		edit(workflow, func(p *v1.RetryPolicy) {
			allowing(v1.NamespacesFromSame, nil)(p)
			p.Spec.MaxAttempts = 3
		})
		expectReason(pay, "job", v1.ReasonParentNotPermitted)
		expectReason(pay, "connector", v1.ReasonAmplificationExceeded)
		Eventually(func(g Gomega) {
			c, p := readyOf(g, pay, "connector")
			g.Expect(p.Status.LeafAttempts).To(BeEquivalentTo(9))
			g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("%s/workflow(3) × %s/job(1) × %s/connector(3) = 9", gw, pay, pay)))
			payload, _ := payloadOf(g, pay, "connector")
			g.Expect(payload.Enforcement.Mode).To(Equal(policyconfig.NoRetry))
		}).Should(Succeed())
	})

	It("follow a namespace's labels for a Selector parent: losing the label withdraws consent", func() {
		gw := labelledNamespace(nil).Name
		payNS := labelledNamespace(map[string]string{"retryguard.io/team": "payments"})
		pay := payNS.Name
		Expect(k8s.Create(ctx, fixtures.Policy(gw, "job", "job", 1,
			allowing(v1.NamespacesFromSelector, map[string]string{"retryguard.io/team": "payments"})))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(pay, "connector", "connector", 3, parentIn(gw, "job")))).To(Succeed())
		expectReason(pay, "connector", v1.ReasonPublished)

		edit(payNS, func(n *corev1.Namespace) { delete(n.Labels, "retryguard.io/team") })
		expectReason(pay, "connector", v1.ReasonParentNotPermitted)

		edit(payNS, func(n *corev1.Namespace) { n.Labels["retryguard.io/team"] = "payments" })
		expectReason(pay, "connector", v1.ReasonPublished)
	})
})

var (
	parentIn = fixtures.ParentIn
	allowing = fixtures.Allowing
)
