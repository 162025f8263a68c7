package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/runtime/clock"
)

// envtest runs no kubelet and no scheduler: the pods created here stay
// Pending, unbound, and are deleted at once (or kept terminating by a
// finalizer). That is exactly what is counted: pod objects, whatever their
// phase.

// fleetBudget shares 20 retries/s among at most partitions pods labelled
// app=<app>.
func fleetBudget(ns, name, app string, partitions int32) *v1.RetryBudget {
	b := fixtures.Budget(ns, name, 10)
	b.Spec.Partitions = ptr.To(partitions)
	b.Spec.MaxRetriesPerSecond = ptr.To[int32](20)
	b.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}
	return b
}

func newPod(ns, name, app string, finalizers ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}, Finalizers: finalizers},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app"}}},
	}
}

func createPods(ns, app string, names ...string) {
	GinkgoHelper()
	for _, n := range names {
		Expect(k8s.Create(ctx, newPod(ns, n, app))).To(Succeed())
	}
}

// consumersOf waits until a budget reports want consumers and returns it.
func expectConsumers(ns, budget string, want int32) *v1.RetryBudget {
	GinkgoHelper()
	var b v1.RetryBudget
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: budget}, &b)).To(Succeed())
		g.Expect(b.Status.Consumers).To(HaveValue(Equal(want)), "status.consumers of %s", budget)
	}).Should(Succeed())
	return &b
}

// countOf reads a budget's published count from its ConfigMap, with the
// members of all its shards joined, as every pod together reads them.
func countOf(g Gomega, ns, budget string) (*policyconfig.Count, *corev1.ConfigMap) {
	var cm corev1.ConfigMap
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.BudgetConfigMapName(budget)}, &cm)).To(Succeed())
	c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return c.WithShards(shardsOf(g, ns, budget)...), &cm
}

// shardsOf reads a budget's published shards of its members.
func shardsOf(g Gomega, ns, budget string) []*policyconfig.MemberShard {
	var cms corev1.ConfigMapList
	g.Expect(k8s.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{policyconfig.MembersLabel: budget})).To(Succeed())
	var out []*policyconfig.MemberShard
	for _, cm := range cms.Items {
		s, err := policyconfig.ParseMemberShard([]byte(cm.Data[policyconfig.MembersDataKey]))
		g.Expect(err).NotTo(HaveOccurred(), cm.Name)
		out = append(out, s)
	}
	return out
}

// expectPublishedCount waits until a budget's ConfigMap carries want
// consumers and returns the count.
func expectPublishedCount(ns, budget string, want int32) *policyconfig.Count {
	GinkgoHelper()
	var c *policyconfig.Count
	Eventually(func(g Gomega) {
		c, _ = countOf(g, ns, budget)
		g.Expect(c.Consumers.Count).To(Equal(want))
	}).Should(Succeed())
	return c
}

var _ = Describe("Fleet budgets", func() {
	It("keeps status.consumers on the pods that match, through creation, relabelling, termination and deletion", func() {
		ns, elsewhere := newNamespace(), newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "checkout", "checkout", 5))).To(Succeed())
		Expect(k8s.Create(ctx, fleetBudget(ns, "search", "search", 5))).To(Succeed())
		expectConsumers(ns, "checkout", 0)

		createPods(ns, "checkout", "c1", "c2", "c3")
		createPods(ns, "search", "s1")
		createPods(elsewhere, "checkout", "x1", "x2") // another namespace's pods are not the budget's
		expectConsumers(ns, "checkout", 3)
		expectConsumers(ns, "search", 1)

		// A relabel leaves one budget and joins the other.
		edit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c3"}}, func(p *corev1.Pod) { p.Labels["app"] = "search" })
		expectConsumers(ns, "checkout", 2)
		expectConsumers(ns, "search", 2)

		// A terminating pod may still retry: it counts until it is gone.
		Expect(k8s.Create(ctx, newPod(ns, "c4", "checkout", "retryguard.test/hold"))).To(Succeed())
		expectConsumers(ns, "checkout", 3)
		held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c4"}}
		Expect(k8s.Delete(ctx, held)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
			g.Expect(held.DeletionTimestamp).NotTo(BeNil())
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			expectConsumersNow(g, ns, "checkout", 3)
		}, "300ms").Should(Succeed())
		edit(held, func(p *corev1.Pod) { p.Finalizers = nil })
		expectConsumers(ns, "checkout", 2)

		// A relabel that keeps the pod counted changes no count, and the
		// status is not rewritten.
		steady := expectConsumers(ns, "checkout", 2)
		edit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c2"}}, func(p *corev1.Pod) { p.Labels["tier"] = "web" })
		Consistently(func(g Gomega) {
			var now v1.RetryBudget
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(steady), &now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(steady.ResourceVersion))
		}, "500ms").Should(Succeed())

		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})).To(Succeed())
		b := expectConsumers(ns, "checkout", 1)
		ready := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
		Expect(ready).To(HaveField("Status", metav1.ConditionTrue))
		Expect(ready.Message).To(ContainSubstring("1 consumers"))
	})

	It("keeps no managed fields in the manager's cache: policies, budgets and published ConfigMaps", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "checkout", "checkout", 5))).To(Succeed())
		createPods(ns, "checkout", "c1")
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "cart", "connector", 3, fixtures.BudgetRef("checkout")))).To(Succeed())
		expectPublishedCount(ns, "checkout", 1)
		expectReason(ns, "cart", v1.ReasonPublished)
		for _, obj := range []client.Object{
			&v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cart"}},
			&v1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "checkout"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policyconfig.ConfigMapName("cart")}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policyconfig.BudgetConfigMapName("checkout")}},
		} {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			Expect(obj.GetManagedFields()).NotTo(BeEmpty(), "the API server keeps %s's managed fields", obj.GetName())
			Expect(mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			Expect(obj.GetManagedFields()).To(BeEmpty(), "the cache holds %T %s's managed fields", obj, obj.GetName())
		}
	})

	It("says in Ready when the count exceeds partitions, the declared maximum", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "small", "web", 2))).To(Succeed())
		createPods(ns, "web", "w1", "w2", "w3")
		Eventually(func(g Gomega) {
			var b v1.RetryBudget
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "small"}, &b)).To(Succeed())
			g.Expect(b.Status.Consumers).To(HaveValue(BeEquivalentTo(3)))
			g.Expect(meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)).To(And(
				HaveField("Status", metav1.ConditionTrue),
				HaveField("Message", ContainSubstring("above partitions (2)"))))
		}).Should(Succeed())
	})

	It("turns a budget whose pod selector escaped validation not Ready, with no count", func() {
		ns := newNamespace()
		b := fleetBudget(ns, "broken", "web", 2)
		// No webhook runs in this suite; the CRD's schema lets this through.
		b.Spec.Consumers.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Near", Values: []string{"web"}}}}
		if err := k8s.Create(ctx, b); err != nil {
			Skip("the API server refuses the selector itself: " + err.Error())
		}
		createPods(ns, "web", "w1")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			g.Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
			g.Expect(meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)).To(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1.ReasonInvalidSpec)))
		}).Should(Succeed())
		Expect(b.Status.Consumers).To(BeNil())
	})

	It("publishes the count once, in the budget's ConfigMap, with a recent observedAt, again on each change, and rewrites no policy", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "checkout", "checkout", 5))).To(Succeed())
		createPods(ns, "checkout", "c1", "c2")
		for _, name := range []string{"cart", "pay"} {
			Expect(k8s.Create(ctx, fixtures.Policy(ns, name, "connector", 3, fixtures.BudgetRef("checkout"),
				fixtures.Service(name)))).To(Succeed())
		}
		before := time.Now()
		c := expectPublishedCount(ns, "checkout", 2)
		Expect(c.Consumers.ObservedAt).To(BeTemporally("~", time.Now(), policyconfig.ConsumerCountRefresh+time.Second))
		var b v1.RetryBudget
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "checkout"}, &b)).To(Succeed())
		Expect(c).To(HaveField("Namespace", ns))
		Expect(c).To(HaveField("Budget", "checkout"))
		Expect(c).To(HaveField("UID", string(b.UID)))
		_, cm := countOf(Default, ns, "checkout")
		Expect(cm.Labels).To(Equal(map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.BudgetLabel: "checkout"}))
		Expect(metav1.GetControllerOf(cm)).To(And(HaveField("Kind", "RetryBudget"), HaveField("UID", b.UID),
			HaveField("BlockOwnerDeletion", HaveValue(BeTrue()))))

		// Each policy says its budget is counted, and carries no count.
		versions := map[string]string{}
		for _, name := range []string{"cart", "pay"} {
			Eventually(func(g Gomega) {
				payload, pcm := payloadOf(g, ns, name)
				g.Expect(payload.Budget).To(And(HaveField("Counted", true), HaveField("Consumers", BeNil()),
					HaveField("UID", string(b.UID)), HaveField("MaxRetriesPerSecond", HaveValue(BeEquivalentTo(20)))))
				g.Expect(pcm.Data[policyconfig.DataKey]).NotTo(ContainSubstring(`"consumers"`))
				versions[name] = pcm.ResourceVersion
			}).Should(Succeed())
		}

		createPods(ns, "checkout", "c3")
		c = expectPublishedCount(ns, "checkout", 3)
		// The new count was taken after the pod existed.
		Expect(c.Consumers.ObservedAt).To(BeTemporally(">", before))
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})).To(Succeed())
		c = expectPublishedCount(ns, "checkout", 2)

		// The count names the pods it counted, by UID.
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		for _, p := range pods.Items {
			Expect(c.Consumers.Includes(string(p.UID))).To(Equal(p.Name != "c1"), p.Name)
		}
		// Two count changes, and no payload was written again.
		for _, name := range []string{"cart", "pay"} {
			_, pcm := payloadOf(Default, ns, name)
			Expect(pcm.ResourceVersion).To(Equal(versions[name]), "the payload of %s was rewritten by a count change", name)
		}

		// The controller's own write echoes back once and changes nothing:
		// within the lease, the same pods keep the same observedAt, young
		// pods or not.
		seen := map[time.Time]bool{}
		Consistently(func(g Gomega) {
			c, _ := countOf(g, ns, "checkout")
			seen[c.Consumers.ObservedAt] = true
		}, 5*time.Second).Should(Succeed())
		Expect(len(seen)).To(BeNumerically("<=", 1), "observedAt renewed %d times in 5 s", len(seen))

		// A hand edit of the count is repaired.
		_, cm = countOf(Default, ns, "checkout")
		forged := cm.DeepCopy()
		forged.Data[policyconfig.CountDataKey] = strings.Replace(forged.Data[policyconfig.CountDataKey], `"count":2`, `"count":1`, 1)
		Expect(k8s.Update(ctx, forged)).To(Succeed())
		Eventually(func(g Gomega) {
			c, _ := countOf(g, ns, "checkout")
			g.Expect(c.Consumers.Count).To(BeEquivalentTo(2))
		}).Should(Succeed())
	})

	It("publishes no count, and no allowance it was not given, for a budget without consumers", func() {
		ns := newNamespace()
		plain := fixtures.Budget(ns, "plain", 10)
		allowance := fixtures.Budget(ns, "allowance", 10)
		allowance.Spec.MaxRetriesPerSecond = ptr.To[int32](20)
		Expect(k8s.Create(ctx, plain)).To(Succeed())
		Expect(k8s.Create(ctx, allowance)).To(Succeed())
		createPods(ns, "checkout", "c1")
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "on-plain", "connector", 3, fixtures.BudgetRef("plain")))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "on-allowance", "connector", 3, fixtures.BudgetRef("allowance"), fixtures.Service("other")))).To(Succeed())
		expectReason(ns, "on-plain", v1.ReasonPublished)
		expectReason(ns, "on-allowance", v1.ReasonPublished)

		_, cm := payloadOf(Default, ns, "on-plain")
		Expect(cm.Data[policyconfig.DataKey]).NotTo(Or(ContainSubstring(`"consumers"`), ContainSubstring(`"counted"`),
			ContainSubstring(`"maxRetriesPerSecond"`)))
		payload, cm := payloadOf(Default, ns, "on-allowance")
		Expect(cm.Data[policyconfig.DataKey]).NotTo(Or(ContainSubstring(`"consumers"`), ContainSubstring(`"counted"`)))
		for _, name := range []string{"plain", "allowance"} {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.BudgetConfigMapName(name)}, &corev1.ConfigMap{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a count ConfigMap for %s: %v", name, err)
		}
		Expect(payload.Budget.MaxRetriesPerSecond).To(HaveValue(BeEquivalentTo(20)))
		for _, b := range []*v1.RetryBudget{plain, allowance} {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			Expect(b.Status.Consumers).To(BeNil())
		}
	})

	It("renews the count's lease every ConsumerCountRefresh, on its clock, and when the pods change", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "checkout", "checkout", 5))).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Budget(ns, "plain", 10))).To(Succeed())
		createPods(ns, "checkout", "c1", "c2")
		Expect(k8s.Create(ctx, fixtures.Policy(ns, "cart", "connector", 3, fixtures.BudgetRef("checkout")))).To(Succeed())
		expectPublishedCount(ns, "checkout", 2)

		// A second reconciler, on a fake clock, whose writes are captured
		// rather than sent, so that it does not fight the suite's manager.
		start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		fake := clock.NewFake(start)
		capture := &capturingClient{Client: mgr.GetClient()}
		r := &controllers.RetryBudgetReconciler{Client: capture, Scheme: mgr.GetScheme(), Limits: policygraph.DefaultLimits(), Clock: fake}
		reconcile := func(name string) (ctrl.Result, *policyconfig.Consumers) {
			GinkgoHelper()
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
			Expect(err).NotTo(HaveOccurred())
			c := capture.lastCount()
			Expect(c).NotTo(BeNil(), "nothing was published")
			return res, &c.Consumers
		}

		res, c := reconcile("checkout")
		members := c.Members
		Expect(c).To(Equal(&policyconfig.Consumers{Count: 2, ObservedAt: start, Members: members}))
		Expect(res.RequeueAfter).To(Equal(policyconfig.ConsumerCountRefresh))

		// Same pods, within the lease: the same count, the same time.
		fake.Advance(5 * time.Second)
		res, c = reconcile("checkout")
		Expect(c.ObservedAt).To(Equal(start))
		Expect(res.RequeueAfter).To(Equal(policyconfig.ConsumerCountRefresh - 5*time.Second))

		// The lease is due: a new count with a new time.
		fake.Advance(policyconfig.ConsumerCountRefresh - 5*time.Second)
		res, c = reconcile("checkout")
		Expect(c).To(Equal(&policyconfig.Consumers{Count: 2, ObservedAt: fake.Now(), Members: members}))
		Expect(res.RequeueAfter).To(Equal(policyconfig.ConsumerCountRefresh))

		// One pod replaces another: the count is the same, but the new pod
		// needs a count that names it.
		createPods(ns, "checkout", "c3")
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})).To(Succeed())
		Eventually(func(g Gomega) {
			var pods metav1.PartialObjectMetadataList
			pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
			g.Expect(mgr.GetCache().List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(pods.Items).To(ConsistOf(HaveField("Name", "c2"), HaveField("Name", "c3")))
			// The cache holds what counting reads, not a pod's managed fields.
			g.Expect(pods.Items).To(HaveEach(And(HaveField("ManagedFields", BeNil()), HaveField("Labels", HaveKey("app")))))
		}).Should(Succeed())
		fake.Advance(time.Second)
		_, c = reconcile("checkout")
		Expect(c.Members).NotTo(Equal(members))
		Expect(c).To(Equal(&policyconfig.Consumers{Count: 2, ObservedAt: fake.Now(), Members: c.Members}))

		// A budget without consumers publishes no count and has no lease.
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "plain"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeZero())
		Expect(capture.lastCount()).To(BeNil())

		// The policy's reconciler keeps the slow resync whatever its
		// budget: the count's lease is not its.
		pr := &controllers.RetryPolicyReconciler{Client: capture, Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("test"), Limits: policygraph.DefaultLimits()}
		res, err = pr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "cart"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(Equal(controllers.DefaultResyncPeriod))
	})
})

// expectConsumersNow checks a budget's status.consumers once.
func expectConsumersNow(g Gomega, ns, budget string, want int32) {
	var b v1.RetryBudget
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: budget}, &b)).To(Succeed())
	g.Expect(b.Status.Consumers).To(HaveValue(Equal(want)))
}

// capturingClient reads through the manager's client, and keeps the
// ConfigMaps it is asked to apply and the status patches instead of sending
// them.
type capturingClient struct {
	client.Client
	mu      sync.Mutex
	applied []string
	counts  []string
	shards  map[string]string // shard → the last one applied
}

func (c *capturingClient) Apply(_ context.Context, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
	cm, ok := obj.(*corev1ac.ConfigMapApplyConfiguration)
	if !ok {
		return fmt.Errorf("unexpected apply of %T", obj)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := cm.Data[policyconfig.CountDataKey]; ok {
		c.counts = append(c.counts, d)
	} else if d, ok := cm.Data[policyconfig.MembersDataKey]; ok {
		if c.shards == nil {
			c.shards = map[string]string{}
		}
		c.shards[*cm.Name] = d
	} else {
		c.applied = append(c.applied, cm.Data[policyconfig.DataKey])
	}
	return nil
}

func (c *capturingClient) Status() client.SubResourceWriter { return discardStatus{} }

// last parses the last payload applied; nil when none was.
func (c *capturingClient) last() *policyconfig.Payload {
	GinkgoHelper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.applied) == 0 {
		return nil
	}
	p, err := policyconfig.Parse([]byte(c.applied[len(c.applied)-1]))
	Expect(err).NotTo(HaveOccurred(), strings.TrimSpace(c.applied[len(c.applied)-1]))
	c.applied = nil
	return p
}

// lastCount parses the last count applied, with the members of the shards
// it names: the live ones, as applied since; nil when none was.
func (c *capturingClient) lastCount() *policyconfig.Count {
	GinkgoHelper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.counts) == 0 {
		return nil
	}
	n, err := policyconfig.ParseCount([]byte(c.counts[len(c.counts)-1]))
	Expect(err).NotTo(HaveOccurred(), c.counts[len(c.counts)-1])
	c.counts = nil
	shards := map[string]*policyconfig.MemberShard{}
	for _, s := range shardsOf(Default, n.Namespace, n.Budget) {
		shards[policyconfig.MemberShardConfigMapName(s.Shard, s.Budget)] = s
	}
	for name, d := range c.shards {
		s, err := policyconfig.ParseMemberShard([]byte(d))
		Expect(err).NotTo(HaveOccurred(), d)
		shards[name] = s
	}
	return n.WithShards(slices.Collect(maps.Values(shards))...)
}

type discardStatus struct{ client.SubResourceWriter }

func (discardStatus) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return nil
}
