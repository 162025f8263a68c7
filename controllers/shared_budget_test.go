package controllers_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// copyOf reads the copy of home/budget's count in namespace ns, with the
// members of the shard copies there joined, and the ConfigMap.
func copyOf(g Gomega, ns, home, budget string) (*policyconfig.Count, *corev1.ConfigMap) {
	var cm corev1.ConfigMap
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.BudgetConfigMapNameIn(ns, home, budget)}, &cm)).To(Succeed())
	c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey]))
	g.Expect(err).NotTo(HaveOccurred())
	var cms corev1.ConfigMapList
	g.Expect(k8s.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{policyconfig.MembersLabel: budget})).To(Succeed())
	var shards []*policyconfig.MemberShard
	for _, s := range cms.Items {
		if s.Name != policyconfig.MemberShardConfigMapNameIn(ns, s.Labels[policyconfig.ShardLabel], home, budget) {
			continue
		}
		sh, err := policyconfig.ParseMemberShard([]byte(s.Data[policyconfig.MembersDataKey]))
		g.Expect(err).NotTo(HaveOccurred(), s.Name)
		shards = append(shards, sh)
	}
	return c.WithShards(shards...), &cm
}

func expectNoCopy(ns, home, budget string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var cms corev1.ConfigMapList
		g.Expect(k8s.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{policyconfig.ManagedByLabel: policyconfig.ManagedByValue})).To(Succeed())
		for _, cm := range cms.Items {
			g.Expect(cm.Name).NotTo(Or(Equal(policyconfig.BudgetConfigMapNameIn(ns, home, budget)),
				HavePrefix(policyconfig.SharedMembersConfigMapPrefix)), "a copy in %s", ns)
		}
	}).Should(Succeed())
}

var _ = Describe("A budget shared across namespaces", func() {
	It("counts the pods of every namespace it admits, copies its count into each one that draws on it, and refuses the others", func() {
		home := newNamespace()
		a, b, c := labelledNamespace(map[string]string{"fleet": "sms"}).Name, labelledNamespace(map[string]string{"fleet": "sms"}).Name,
			labelledNamespace(nil).Name
		budget := fleetBudget(home, "fleet", "fleet", 50)
		budget.Spec.Consumers.Namespaces = &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "sms"}}}
		Expect(k8s.Create(ctx, budget)).To(Succeed())
		for _, ns := range []string{a, b, c} {
			Expect(k8s.Create(ctx, fixtures.Policy(ns, "sms", "connector", 3, fixtures.BudgetIn(home, "fleet")))).To(Succeed())
		}
		createPods(home, "fleet", "h1", "h2")
		createPods(a, "fleet", "a1", "a2")
		createPods(b, "fleet", "b1")
		createPods(c, "fleet", "c1", "c2", "c3") // not admitted: not counted

		Expect(expectConsumers(home, "fleet", 5).Status.PolicyCount).To(BeEquivalentTo(3), "every namespace's policy draws on it")
		Eventually(func(g Gomega) {
			own, _ := countOf(g, home, "fleet")
			g.Expect(own.Consumers.Count).To(BeEquivalentTo(5))
			for _, ns := range []string{a, b} {
				cp, cm := copyOf(g, ns, home, "fleet")
				// The same count, for the same budget, names the same pods.
				g.Expect(cp.Namespace).To(Equal(home))
				g.Expect(cp.UID).To(Equal(own.UID))
				g.Expect(cp.Consumers).To(Equal(own.Consumers))
				owner := metav1.GetControllerOf(cm)
				g.Expect(owner).NotTo(BeNil())
				g.Expect(owner.Kind).To(Equal(policyconfig.SharedOwnerKind))
				g.Expect(owner.Name).To(Equal("sms"))
				p, _ := payloadOf(g, ns, "sms")
				g.Expect(p.Enforcement.Mode).To(Equal(policyconfig.Enforced))
				g.Expect(p.Budget.Namespace).To(Equal(home))
				g.Expect(p.Join(cp).Budget.Consumers).NotTo(BeNil(), "the copy joins the payload of %s", ns)
			}
		}).Should(Succeed())
		expectReason(c, "sms", v1.ReasonBudgetNotShared)
		Eventually(func(g Gomega) {
			cond, _ := readyOf(g, c, "sms")
			g.Expect(cond.Message).To(ContainSubstring(fmt.Sprintf("RetryBudget %s/fleet does not admit namespace %q", home, c)))
		}).Should(Succeed())
		expectNoCopy(c, home, "fleet")

		By("labelling c admits it: its pods are counted and its policy is published")
		var nsC corev1.Namespace
		Expect(k8s.Get(ctx, client.ObjectKey{Name: c}, &nsC)).To(Succeed())
		nsC.Labels = map[string]string{"fleet": "sms"}
		Expect(k8s.Update(ctx, &nsC)).To(Succeed())
		expectConsumers(home, "fleet", 8)
		expectReason(c, "sms", v1.ReasonPublished)
		Eventually(func(g Gomega) {
			cp, _ := copyOf(g, c, home, "fleet")
			g.Expect(cp.Consumers.Count).To(BeEquivalentTo(8))
		}).Should(Succeed())

		By("unlabelling b withdraws consent: its pods leave the count, its copy goes, its policy makes one attempt")
		var nsB corev1.Namespace
		Expect(k8s.Get(ctx, client.ObjectKey{Name: b}, &nsB)).To(Succeed())
		nsB.Labels = nil
		Expect(k8s.Update(ctx, &nsB)).To(Succeed())
		expectConsumers(home, "fleet", 7)
		expectReason(b, "sms", v1.ReasonBudgetNotShared)
		expectNoCopy(b, home, "fleet")

		By("a namespace whose last policy on the budget goes loses its copy")
		Expect(k8s.Delete(ctx, &v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "sms"}})).To(Succeed())
		expectNoCopy(a, home, "fleet")

		By("deleting the budget deletes its copies")
		Expect(k8s.Delete(ctx, budget)).To(Succeed())
		expectNoCopy(c, home, "fleet")
		expectReason(c, "sms", v1.ReasonBudgetNotFound)
	})

	It("repairs a copy that is deleted", func() {
		home := newNamespace()
		a := labelledNamespace(nil).Name
		// All admits every namespace: a label of its own keeps the other specs' pods out.
		budget := fleetBudget(home, "fleet", home, 50)
		budget.Spec.Consumers.Namespaces = &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromAll)}
		Expect(k8s.Create(ctx, budget)).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Policy(a, "sms", "connector", 3, fixtures.BudgetIn(home, "fleet")))).To(Succeed())
		createPods(a, home, "a1")
		var cm *corev1.ConfigMap
		Eventually(func(g Gomega) {
			var cp *policyconfig.Count
			cp, cm = copyOf(g, a, home, "fleet")
			g.Expect(cp.Consumers.Count).To(BeEquivalentTo(1))
		}).Should(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			cp, live := copyOf(g, a, home, "fleet")
			g.Expect(live.UID).NotTo(Equal(cm.UID))
			g.Expect(cp.Consumers.Count).To(BeEquivalentTo(1))
		}).Should(Succeed())
	})
})
