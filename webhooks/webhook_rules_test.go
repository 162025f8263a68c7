package webhooks_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// refused expects err to be the webhook's Invalid answer carrying every part.
func refused(err error, parts ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "not Invalid: %v", err)
	Expect(err.Error()).To(ContainSubstring(`admission webhook "vretry`), "not the webhook's answer: %v", err)
	for _, p := range parts {
		Expect(err.Error()).To(ContainSubstring(p))
	}
}

var _ = Describe("Layer product", func() {
	It("refuses the spec's [3,3,3] chain: 27 calls at the bottom", func() {
		ns := newNamespace()
		create(policyIn(ns, "workflow", "workflow", 3))
		create(policyIn(ns, "connector", "connector", 3, parent("job")))
		err := k8s.Create(ctx, policyIn(ns, "job", "job", 3, parent("workflow")))
		refused(err, "spec.maxAttempts", "ERR_LAYER_AMPLIFICATION", "workflow(3) × job(3) × connector(3) = 27 > 3")
	})

	It("accepts the spec's [1,3,1] chain: 3 calls at the bottom", func() {
		ns := newNamespace()
		create(policyIn(ns, "workflow", "workflow", 1))
		create(policyIn(ns, "job", "job", 3, parent("workflow")))
		create(policyIn(ns, "connector", "connector", 1, parent("job")))
	})

	It("refuses an update that raises a parent above the limit for an existing child", func() {
		ns := newNamespace()
		job := policyIn(ns, "job", "job", 1)
		create(job)
		create(policyIn(ns, "connector", "connector", 3, parent("job")))
		job.Spec.MaxAttempts = 2
		refused(k8s.Update(ctx, job), "job(2) × connector(3) = 6 > 3")
	})

	It("counts a hidden layer: a connector whose SDK makes 3 attempts pushes a [1,1] chain over the limit", func() {
		ns := newNamespace()
		create(policyIn(ns, "job", "job", 1))
		create(policyIn(ns, "connector", "connector", 1, parent("job")))
		err := k8s.Create(ctx, policyIn(ns, "sdk", "sdk", 3, parent("connector"), fixtures.Hidden(3)))
		refused(err, "spec.maxAttempts", "ERR_LAYER_AMPLIFICATION", "job(1) × connector(1) × sdk(3×3 hidden) = 9 > 3")
		create(policyIn(ns, "sdk", "sdk", 1, parent("connector"), fixtures.Hidden(3)))
	})

	It("accepts a parentRef to a policy that does not exist yet, with a warning", func() {
		ns := newNamespace()
		create(policyIn(ns, "connector", "connector", 3, parent("job")))
		Expect(warnings.Take()).To(ContainElement(ContainSubstring(`RetryPolicy "job" does not exist yet`)))
	})

	It("refuses a parentRef cycle", func() {
		ns := newNamespace()
		create(policyIn(ns, "a", "a", 1, parent("b")))
		err := k8s.Create(ctx, policyIn(ns, "b", "b", 1, parent("a")))
		refused(err, "spec.layer.parentRef.name", "ERR_LAYER_CYCLE", "b → a → b")
	})
})

var payments = map[string]string{"retryguard.io/team": "payments"}

var _ = Describe("Layers across namespaces", func() {
	It("refuses a [3,3,3] chain across three namespaces, naming the layers it referenced and counting the others", func() {
		gw, co, pay := newNamespace(), newNamespace(), newNamespace()
		create(policyIn(gw, "workflow", "workflow", 3, allowing(v1.NamespacesFromAll, nil)))
		create(policyIn(pay, "connector", "connector", 3, parentIn(co, "job")))
		err := k8s.Create(ctx, policyIn(co, "job", "job", 3, parentIn(gw, "workflow"), allowing(v1.NamespacesFromAll, nil)))
		refused(err, "spec.maxAttempts", "ERR_LAYER_AMPLIFICATION",
			fmt.Sprintf("%s/workflow(3) × %s/job(3) × 1 layer in another namespace (×3) = 27 > 3", gw, co))
		Expect(err.Error()).NotTo(ContainSubstring(pay))
	})

	It("refuses a child from another namespace when its parent allows only its own (Same)", func() {
		gw, pay := newNamespace(), newNamespace()
		create(policyIn(gw, "job", "job", 1, allowing(v1.NamespacesFromSame, nil)))
		err := k8s.Create(ctx, policyIn(pay, "connector", "connector", 3, parentIn(gw, "job")))
		refused(err, "spec.layer.parentRef.namespace", "ERR_PARENT_NOT_PERMITTED",
			fmt.Sprintf(`RetryPolicy "%s/job" does not allow child layers from namespace %q`, gw, pay), "from is Same")
	})

	It("accepts a child from another namespace when its parent allows All", func() {
		gw, pay := newNamespace(), newNamespace()
		create(policyIn(gw, "job", "job", 1, allowing(v1.NamespacesFromAll, nil)))
		create(policyIn(pay, "connector", "connector", 3, parentIn(gw, "job")))
		Expect(warnings.Take()).To(BeEmpty())
	})

	It("accepts a child whose namespace labels match its Selector parent, and counts it against the parent", func() {
		gw, pay := newNamespace(), labelledNamespace(payments)
		job := policyIn(gw, "job", "job", 1, allowing(v1.NamespacesFromSelector, payments))
		create(job)
		create(policyIn(pay, "connector", "connector", 3, parentIn(gw, "job")))
		Expect(warnings.Take()).To(BeEmpty())
		job.Spec.MaxAttempts = 2
		err := k8s.Update(ctx, job)
		refused(err, "ERR_LAYER_AMPLIFICATION", fmt.Sprintf("%s/job(2) × 1 layer in another namespace (×3) = 6 > 3", gw))
		Expect(err.Error()).NotTo(ContainSubstring(pay))
	})

	It("refuses a child whose namespace labels do not match its Selector parent", func() {
		gw, ads := newNamespace(), labelledNamespace(map[string]string{"retryguard.io/team": "ads"})
		create(policyIn(gw, "job", "job", 1, allowing(v1.NamespacesFromSelector, payments)))
		err := k8s.Create(ctx, policyIn(ads, "connector", "connector", 3, parentIn(gw, "job")))
		refused(err, "spec.layer.parentRef.namespace", "ERR_PARENT_NOT_PERMITTED", "the selector does not match namespace")
	})

	It("admits a parent that withdraws consent, warning how many children it no longer counts", func() {
		gw, pay := newNamespace(), newNamespace()
		job := policyIn(gw, "job", "job", 3, allowing(v1.NamespacesFromAll, nil))
		create(job)
		create(policyIn(pay, "connector", "connector", 1, parentIn(gw, "job")))
		job.Spec.Layer.AllowedChildren = nil
		Expect(k8s.Update(ctx, job)).To(Succeed())
		said := warnings.Take()
		Expect(said).To(ContainElement(ContainSubstring("does not allow 1 child layer in another namespace")))
		Expect(said).NotTo(ContainElement(ContainSubstring(pay)))
	})
})

var _ = Describe("Shared failure domains", func() {
	It("refuses a Standard caller on a Critical caller's pool", func() {
		ns := newNamespace()
		create(policyIn(ns, "sms-2fa", "connector", 3, onPool("pool-sms-auth"), critical))
		err := k8s.Create(ctx, policyIn(ns, "marketing", "connector", 3, onPool("pool-sms-auth"), onBudget("marketing")))
		refused(err, "spec.connectionPool.name", "ERR_SHARED_FAILURE_DOMAIN_LEAK", "already used by 1 policy of another criticality")
	})

	It("accepts a pool shared by the same criticality and service", func() {
		ns := newNamespace()
		create(policyIn(ns, "sms-2fa", "connector", 3, onPool("pool-sms-auth"), critical))
		create(policyIn(ns, "sms-2fa-resend", "connector", 2, onPool("pool-sms-auth"), critical))
	})

	It("refuses a Critical and a Standard caller sharing one budget", func() {
		ns := newNamespace()
		create(policyIn(ns, "sms-2fa", "connector", 3, critical))
		err := k8s.Create(ctx, policyIn(ns, "marketing", "connector", 3))
		refused(err, "spec.budgetRef.name", "ERR_SHARED_FAILURE_DOMAIN_LEAK", "must not share a retry quota")
	})
})

var _ = Describe("Platform cap", func() {
	It("refuses a budget above 10%", func() {
		ns := newNamespace()
		refused(k8s.Create(ctx, budgetIn(ns, "greedy", 25)), "spec.retryPercent", "ERR_BUDGET_ABOVE_PLATFORM_CAP", "platform cap of 10%")
	})

	It("accepts 10%, and warns when a floor weakens the ratio", func() {
		ns := newNamespace()
		create(budgetIn(ns, "telephony", 10))
		Expect(warnings.Take()).To(BeEmpty())
		b := budgetIn(ns, "floor", 10)
		b.Spec.MinRetriesPerSecond = ptr.To[int32](2)
		create(b)
		Expect(warnings.Take()).To(ContainElement(ContainSubstring("below 20 primary requests/s")))
	})

	It("refuses an update that raises a budget above the cap", func() {
		ns := newNamespace()
		b := budgetIn(ns, "telephony", 10)
		create(b)
		b.Spec.RetryPercent = 50
		refused(k8s.Update(ctx, b), "ERR_BUDGET_ABOVE_PLATFORM_CAP")
	})
})

var _ = Describe("Feasibility", func() {
	It("accepts a schedule that cannot fit its deadline, warning how many attempts can run", func() {
		ns := newNamespace()
		p := policyIn(ns, "slow", "connector", 3)
		p.Spec.Deadline = v1.DurationOf(4 * time.Second)
		p.Spec.PerAttemptTimeout = ptr.To(v1.DurationOf(2 * time.Second))
		create(p)
		Expect(warnings.Take()).To(ContainElement(ContainSubstring("only 1 of 3 attempts can run")))
	})
})

var _ = Describe("Single-object rules", func() {
	It("still meet CEL first, so one request gets both kinds of answer in order", func() {
		ns := newNamespace()
		p := policyIn(ns, "five", "connector", 5)
		err := k8s.Create(ctx, p)
		Expect(err).To(MatchError(ContainSubstring("ERR_RETRY_LIMIT_EXCEEDED")))
		var stored v1.RetryPolicy
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), &stored))).To(BeTrue())
	})
})

var (
	parentIn = fixtures.ParentIn
	allowing = fixtures.Allowing
)
