package controllers_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// GitOps tools (Flux, Argo CD, kpt, kubectl's kstatus) judge health with
// the kstatus library; each object here is read back unstructured, as they
// read it, and judged by that library itself.

func kstatusOf(g Gomega, kind, ns, name string) *status.Result {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
	res, err := status.Compute(u)
	g.Expect(err).NotTo(HaveOccurred())
	return res
}

func expectKstatus(kind, ns, name string, want status.Status) *status.Result {
	GinkgoHelper()
	var res *status.Result
	Eventually(func(g Gomega) {
		res = kstatusOf(g, kind, ns, name)
		g.Expect(res.Status).To(Equal(want), res.Message)
	}).Should(Succeed())
	return res
}

// expectInProgressOnUpdate sets one spec field of an object and judges the
// object the update returns: the one stored before any reconcile of the new
// generation could run.
func expectInProgressOnUpdate(kind, ns, name string, value any, fields ...string) {
	GinkgoHelper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
	Expect(unstructured.SetNestedField(u.Object, value, fields...)).To(Succeed())
	Expect(k8s.Update(ctx, u)).To(Succeed())
	res, err := status.Compute(u)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.Status).To(Equal(status.InProgressStatus), res.Message)
}

// eventsOf lists the events recorded about one object.
func eventsOf(g Gomega, ns, name string) []eventsv1.Event {
	var evs eventsv1.EventList
	g.Expect(k8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

var _ = Describe("kstatus of a RetryPolicy", func() {
	It("is Current once Ready, with one Normal Published event", func() {
		ns, p := publishedConnector("current")
		expectKstatus("RetryPolicy", ns, p.Name, status.CurrentStatus)
		Eventually(func(g Gomega) []eventsv1.Event { return eventsOf(g, ns, p.Name) }).Should(ContainElement(And(
			HaveField("Type", "Normal"), HaveField("Reason", v1.ReasonPublished), HaveField("Action", "Publish"))))
	})

	It("is InProgress while a new generation is not yet published, then Current again", func() {
		ns, p := publishedConnector("edited")
		expectKstatus("RetryPolicy", ns, p.Name, status.CurrentStatus)
		expectInProgressOnUpdate("RetryPolicy", ns, p.Name, int64(2), "spec", "maxAttempts")
		expectKstatus("RetryPolicy", ns, p.Name, status.CurrentStatus)
	})

	It("is Failed, never Current, when the controller refuses it (NoRetry): Stalled", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "job", "job", 3))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "connector", "connector", 3, fixtures.Parent("job")))).To(Succeed())
		expectReason(ns, "connector", v1.ReasonAmplificationExceeded)
		res := expectKstatus("RetryPolicy", ns, "connector", status.FailedStatus)
		Expect(res.Message).To(ContainSubstring("single attempt"))
		_, stored := readyOf(Default, ns, "connector")
		Expect(stored.Status.Conditions).To(ContainElement(And(HaveField("Type", v1.ConditionStalled),
			HaveField("Status", BeEquivalentTo("True")), HaveField("Reason", v1.ReasonAmplificationExceeded))))
	})

	It("is InProgress, never Current, while NoRetry for a missing budget (Reconciling), then Current", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "waiting", "connector", 3))).To(Succeed())
		expectReason(ns, "waiting", v1.ReasonBudgetNotFound)
		Consistently(func(g Gomega) status.Status { return kstatusOf(g, "RetryPolicy", ns, "waiting").Status }, "300ms").
			Should(Equal(status.InProgressStatus))
		_, stored := readyOf(Default, ns, "waiting")
		Expect(stored.Status.Conditions).To(ContainElement(And(HaveField("Type", v1.ConditionReconciling),
			HaveField("Reason", v1.ReasonBudgetNotFound))))
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		expectKstatus("RetryPolicy", ns, "waiting", status.CurrentStatus)
		_, stored = readyOf(Default, ns, "waiting")
		Expect(stored.Status.Conditions).NotTo(ContainElement(HaveField("Type", v1.ConditionReconciling)))
	})

	It("is Current for the minimal policy (one attempt, no backoff, no budget)", func() {
		ns := newNamespace()
		p := &v1.RetryPolicy{Spec: v1.RetryPolicySpec{Target: v1.RetryTarget{Service: "ledger"},
			Layer: v1.RetryLayer{Name: "connector"}, MaxAttempts: 1, Deadline: v1.DurationOf(2 * time.Second)}}
		p.Name, p.Namespace = "minimal", ns
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReason(ns, p.Name, v1.ReasonPublished)
		expectKstatus("RetryPolicy", ns, p.Name, status.CurrentStatus)
	})
})

var _ = Describe("kstatus and events of a RetryBudget", func() {
	It("is Current once Accepted, with a Normal Accepted event, and InProgress while a change is not yet observed", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, "ok", 10))).To(Succeed())
		expectKstatus("RetryBudget", ns, "ok", status.CurrentStatus)
		Eventually(func(g Gomega) []eventsv1.Event { return eventsOf(g, ns, "ok") }).Should(ContainElement(And(
			HaveField("Type", "Normal"), HaveField("Reason", v1.ReasonAccepted))))
		expectInProgressOnUpdate("RetryBudget", ns, "ok", int64(5), "spec", "retryPercent")
		expectKstatus("RetryBudget", ns, "ok", status.CurrentStatus)
	})

	It("is Failed above the platform cap (Stalled), with a Warning event", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, "greedy", 40))).To(Succeed())
		expectKstatus("RetryBudget", ns, "greedy", status.FailedStatus)
		Eventually(func(g Gomega) []eventsv1.Event { return eventsOf(g, ns, "greedy") }).Should(ContainElement(And(
			HaveField("Type", "Warning"), HaveField("Reason", v1.ReasonAbovePlatformCap))))
	})

	It("warns once when its selector matches no pod, and says when consumers are counted", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "fleet", "checkout", 2))).To(Succeed())
		expectConsumers(ns, "fleet", 0)
		Eventually(func(g Gomega) []eventsv1.Event { return eventsOf(g, ns, "fleet") }).Should(ContainElement(And(
			HaveField("Type", "Warning"), HaveField("Reason", v1.ReasonNoConsumers))))
		createPods(ns, "checkout", "c1", "c2", "c3")
		expectConsumers(ns, "fleet", 3)
		Eventually(func(g Gomega) []eventsv1.Event { return eventsOf(g, ns, "fleet") }).Should(And(
			ContainElement(And(HaveField("Type", "Normal"), HaveField("Reason", v1.ReasonConsumersCounted))),
			ContainElement(And(HaveField("Type", "Warning"), HaveField("Reason", v1.ReasonConsumersAbovePartitions)))))
		var noConsumers int
		for _, e := range eventsOf(Default, ns, "fleet") {
			if e.Reason == v1.ReasonNoConsumers {
				noConsumers++
			}
		}
		Expect(noConsumers).To(Equal(1), "one NoConsumers event, not one per reconcile")
	})
})
